//! The AWS configuration every AWS client here shares (SQS, Bedrock): the standard chain for
//! credentials, region and endpoint overrides (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_SQS`,
//! `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`), on one rustls (ring) TLS stack.

use aws_config::{ConfigLoader, SdkConfig};

/// The standard chain's loader on this TLS stack, for a caller to name more.
pub fn loader() -> ConfigLoader {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(http)
}

/// The configuration from the environment, as every AWS SDK reads it.
pub async fn sdk_config() -> SdkConfig {
    loader().load().await
}
