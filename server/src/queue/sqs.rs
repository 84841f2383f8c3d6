//! Amazon SQS, or any SQS-compatible endpoint, through `aws-sdk-sqs`.
//!
//! Configuration follows the standard AWS chain (environment, profile, instance roles) and
//! honours `AWS_ENDPOINT_URL_SQS`. Every request is bounded by a timeout; a request that timed
//! out may still have taken effect and is reported as [`QueueError::Timeout`]. SQS counts
//! visibility in whole seconds: shorter durations round up.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry,
    MessageSystemAttributeName, QueueAttributeName, SendMessageBatchRequestEntry,
};
use aws_sdk_sqs::Client;

use super::{
    check_batch, BatchResult, Delivery, Depth, Queue, QueueError, ReceiptHandle, MAX_BATCH,
    MAX_VISIBILITY, MAX_WAIT,
};

/// One SQS queue and, when it has a redrive policy, its dead-letter queue.
#[derive(Clone)]
pub struct SqsQueue {
    client: Client,
    name: Arc<str>,
    url: Arc<str>,
    dead_letter_url: Option<Arc<str>>,
    request_timeout: Duration,
}

/// Whole seconds, rounded up, as SQS wants them.
fn secs(d: Duration) -> i32 {
    i32::try_from(d.as_millis().div_ceil(1000)).unwrap_or(i32::MAX)
}

/// An AWS error text with anything that may be a receipt handle replaced: SQS and
/// compatible peers quote the offending value in messages such as "Value … for parameter
/// ReceiptHandle is invalid", and these texts reach logs and the terminal.
pub(crate) fn redact_handles(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        // Receipt handles are long runs of base64/URL-safe characters; ordinary words, ids
        // and URLs in error messages are far shorter or contain other characters.
        if word.len() >= 32 {
            out.push_str("<redacted>");
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '-' | '_') {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

fn classify<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug>(
    error: SdkError<E, R>,
) -> QueueError {
    match &error {
        SdkError::TimeoutError(_) => QueueError::Timeout,
        SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            QueueError::Unavailable(redact_handles(&error.to_string()))
        }
        SdkError::ServiceError(service) => {
            let code = service.err().code().unwrap_or_default();
            let message = redact_handles(service.err().message().unwrap_or_default());
            if code.contains("ReceiptHandleIsInvalid") || code.contains("InvalidIdFormat") {
                QueueError::InvalidReceiptHandle
            } else if code.contains("MessageNotInflight") {
                QueueError::MessageNotInflight
            } else if code.contains("OverLimit") {
                QueueError::OverLimit
            } else if code.contains("InvalidParameterValue")
                && message.to_ascii_lowercase().contains("visibilitytimeout")
            {
                QueueError::VisibilityCapExceeded
            } else if code.contains("Throttl")
                || code.contains("ServiceUnavailable")
                || code.contains("InternalError")
            {
                QueueError::Unavailable(format!("{code}: {message}"))
            } else {
                QueueError::Invalid(format!("{code}: {message}"))
            }
        }
        _ => QueueError::Unavailable(redact_handles(&error.to_string())),
    }
}

fn batch_error_code(code: &str) -> QueueError {
    if code.contains("ReceiptHandleIsInvalid") {
        QueueError::InvalidReceiptHandle
    } else if code.contains("MessageNotInflight") {
        QueueError::MessageNotInflight
    } else {
        QueueError::Invalid(code.to_owned())
    }
}

impl SqsQueue {
    /// A client from the standard AWS configuration chain ([`crate::aws::sdk_config`]).
    pub async fn client_from_env() -> Client {
        Client::new(&crate::aws::sdk_config().await)
    }

    async fn bounded<T, F: std::future::Future<Output = Result<T, QueueError>>>(
        &self,
        extra: Duration,
        request: F,
    ) -> Result<T, QueueError> {
        tokio::time::timeout(self.request_timeout + extra, request)
            .await
            .unwrap_or(Err(QueueError::Timeout))
    }

    /// Opens the queue named `name` (or whose URL it is), and its dead-letter queue if the
    /// queue has a redrive policy.
    pub async fn open(
        client: Client,
        name: &str,
        request_timeout: Duration,
    ) -> Result<Self, QueueError> {
        let url = if name.starts_with("http://") || name.starts_with("https://") {
            name.to_owned()
        } else {
            queue_url(&client, name).await?
        };
        let queue_name = url.rsplit('/').next().unwrap_or(name).to_owned();
        let attributes = client
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::RedrivePolicy)
            .send()
            .await
            .map_err(classify)?;
        let dead_letter_url = match attributes
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::RedrivePolicy))
        {
            Some(policy) => {
                let policy: serde_json::Value = serde_json::from_str(policy)
                    .map_err(|e| QueueError::Invalid(format!("redrive policy: {e}")))?;
                let arn = policy["deadLetterTargetArn"].as_str().unwrap_or_default();
                let dlq_name = arn.rsplit(':').next().unwrap_or_default();
                Some(queue_url(&client, dlq_name).await?.into())
            }
            None => None,
        };
        Ok(SqsQueue {
            client,
            name: queue_name.into(),
            url: url.into(),
            dead_letter_url,
            request_timeout,
        })
    }

    /// Creates `name` and `name-dlq` (idempotently), with a redrive policy after
    /// `max_receive_count` receives, and opens it. For development and tests.
    pub async fn create(
        client: Client,
        name: &str,
        max_receive_count: u32,
        request_timeout: Duration,
    ) -> Result<Self, QueueError> {
        let dlq_url = client
            .create_queue()
            .queue_name(format!("{name}-dlq"))
            .attributes(QueueAttributeName::MessageRetentionPeriod, "1209600")
            .send()
            .await
            .map_err(classify)?
            .queue_url
            .unwrap_or_default();
        let dlq_arn = client
            .get_queue_attributes()
            .queue_url(&dlq_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .map_err(classify)?
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
            .ok_or_else(|| QueueError::Invalid("the dead-letter queue has no ARN".into()))?;
        let policy = serde_json::json!({
            "deadLetterTargetArn": dlq_arn,
            "maxReceiveCount": max_receive_count.max(1).to_string(),
        });
        client
            .create_queue()
            .queue_name(name)
            .attributes(QueueAttributeName::RedrivePolicy, policy.to_string())
            .attributes(QueueAttributeName::MessageRetentionPeriod, "1209600")
            .send()
            .await
            .map_err(classify)?;
        SqsQueue::open(client, name, request_timeout).await
    }
}

impl SqsQueue {
    /// Deletes this queue and its dead-letter queue (a drill's, once its run is over); best
    /// effort.
    pub async fn delete_queues(&self) {
        for url in std::iter::once(&self.url).chain(self.dead_letter_url.as_ref()) {
            if let Err(error) = self
                .client
                .delete_queue()
                .queue_url(url.as_ref())
                .send()
                .await
            {
                tracing::warn!(error = %classify(error), "could not delete a drill queue");
            }
        }
    }
}

async fn queue_url(client: &Client, name: &str) -> Result<String, QueueError> {
    Ok(client
        .get_queue_url()
        .queue_name(name)
        .send()
        .await
        .map_err(classify)?
        .queue_url
        .unwrap_or_default())
}

impl Queue for SqsQueue {
    fn describe(&self) -> String {
        format!("sqs:{}", self.name)
    }

    async fn send(&self, body: &str, delay: Duration) -> Result<String, QueueError> {
        self.bounded(Duration::ZERO, async {
            let out = self
                .client
                .send_message()
                .queue_url(&*self.url)
                .message_body(body)
                .delay_seconds(secs(delay).min(900))
                .send()
                .await
                .map_err(classify)?;
            Ok(out.message_id.unwrap_or_default())
        })
        .await
    }

    async fn send_batch(
        &self,
        bodies: &[String],
    ) -> Result<Vec<Result<String, QueueError>>, QueueError> {
        check_batch(bodies.len())?;
        if bodies.is_empty() {
            return Ok(Vec::new());
        }
        let entries = bodies
            .iter()
            .enumerate()
            .map(|(i, body)| {
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body)
                    .build()
                    .map_err(|e| QueueError::Invalid(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.bounded(Duration::ZERO, async {
            let out = self
                .client
                .send_message_batch()
                .queue_url(&*self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(classify)?;
            let mut results: Vec<Result<String, QueueError>> =
                vec![Err(QueueError::Unavailable("no answer for this entry".into())); bodies.len()];
            for ok in out.successful() {
                if let Ok(i) = ok.id().parse::<usize>() {
                    if let Some(slot) = results.get_mut(i) {
                        *slot = Ok(ok.message_id().to_owned());
                    }
                }
            }
            for failed in out.failed() {
                if let Ok(i) = failed.id().parse::<usize>() {
                    if let Some(slot) = results.get_mut(i) {
                        *slot = Err(batch_error_code(failed.code()));
                    }
                }
            }
            Ok(results)
        })
        .await
    }

    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Vec<Delivery>, QueueError> {
        if !(1..=MAX_BATCH).contains(&max) || visibility > MAX_VISIBILITY || wait > MAX_WAIT {
            return Err(QueueError::Invalid(
                "receive 1 to 10 messages, visibility ≤ 12 h, wait ≤ 20 s".into(),
            ));
        }
        self.bounded(wait, async {
            let out = self
                .client
                .receive_message()
                .queue_url(&*self.url)
                .max_number_of_messages(max as i32)
                .visibility_timeout(secs(visibility))
                .wait_time_seconds(secs(wait).min(20))
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .send()
                .await
                .map_err(classify)?;
            Ok(out
                .messages
                .unwrap_or_default()
                .into_iter()
                .map(|m| {
                    let attributes: HashMap<MessageSystemAttributeName, String> =
                        m.attributes.unwrap_or_default();
                    let number = |name: MessageSystemAttributeName| {
                        attributes.get(&name).and_then(|v| v.parse::<i64>().ok())
                    };
                    Delivery {
                        message_id: m.message_id.unwrap_or_default(),
                        receipt: ReceiptHandle::new(m.receipt_handle.unwrap_or_default()),
                        body: m.body.unwrap_or_default(),
                        receive_count: number(MessageSystemAttributeName::ApproximateReceiveCount)
                            .and_then(|n| u32::try_from(n).ok())
                            .unwrap_or(1),
                        first_receive_at_ms: number(
                            MessageSystemAttributeName::ApproximateFirstReceiveTimestamp,
                        ),
                        sent_at_ms: number(MessageSystemAttributeName::SentTimestamp),
                    }
                })
                .collect())
        })
        .await
    }

    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> Result<(), QueueError> {
        self.bounded(Duration::ZERO, async {
            self.client
                .change_message_visibility()
                .queue_url(&*self.url)
                .receipt_handle(receipt.expose())
                .visibility_timeout(secs(timeout))
                .send()
                .await
                .map_err(classify)?;
            Ok(())
        })
        .await
    }

    async fn change_visibility_batch(
        &self,
        entries: &[(ReceiptHandle, Duration)],
    ) -> Result<BatchResult, QueueError> {
        check_batch(entries.len())?;
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let request = entries
            .iter()
            .enumerate()
            .map(|(i, (receipt, timeout))| {
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(receipt.expose())
                    .visibility_timeout(secs(*timeout))
                    .build()
                    .map_err(|e| QueueError::Invalid(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.bounded(Duration::ZERO, async {
            let out = self
                .client
                .change_message_visibility_batch()
                .queue_url(&*self.url)
                .set_entries(Some(request))
                .send()
                .await
                .map_err(classify)?;
            Ok(batch_results(
                entries.len(),
                out.successful().iter().map(|s| s.id()),
                out.failed(),
            ))
        })
        .await
    }

    async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), QueueError> {
        self.bounded(Duration::ZERO, async {
            self.client
                .delete_message()
                .queue_url(&*self.url)
                .receipt_handle(receipt.expose())
                .send()
                .await
                .map_err(classify)?;
            Ok(())
        })
        .await
    }

    async fn delete_batch(&self, receipts: &[ReceiptHandle]) -> Result<BatchResult, QueueError> {
        check_batch(receipts.len())?;
        if receipts.is_empty() {
            return Ok(Vec::new());
        }
        let request = receipts
            .iter()
            .enumerate()
            .map(|(i, receipt)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(receipt.expose())
                    .build()
                    .map_err(|e| QueueError::Invalid(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.bounded(Duration::ZERO, async {
            let out = self
                .client
                .delete_message_batch()
                .queue_url(&*self.url)
                .set_entries(Some(request))
                .send()
                .await
                .map_err(classify)?;
            Ok(batch_results(
                receipts.len(),
                out.successful().iter().map(|s| s.id()),
                out.failed(),
            ))
        })
        .await
    }

    async fn depth(&self) -> Result<Depth, QueueError> {
        self.bounded(Duration::ZERO, async {
            let out = self
                .client
                .get_queue_attributes()
                .queue_url(&*self.url)
                .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
                .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
                .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
                .send()
                .await
                .map_err(classify)?;
            let attributes = out.attributes.unwrap_or_default();
            let get = |name: QueueAttributeName| {
                attributes
                    .get(&name)
                    .and_then(|v| v.parse::<i64>().ok())
                    .unwrap_or(0)
            };
            Ok(Depth {
                visible: get(QueueAttributeName::ApproximateNumberOfMessages),
                in_flight: get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
                delayed: get(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
            })
        })
        .await
    }

    fn dead_letters(&self) -> Option<Self> {
        self.dead_letter_url.as_ref().map(|url| SqsQueue {
            client: self.client.clone(),
            name: format!("{}-dlq", self.name).into(),
            url: url.clone(),
            dead_letter_url: None,
            request_timeout: self.request_timeout,
        })
    }
}

fn batch_results<'a>(
    len: usize,
    successful: impl Iterator<Item = &'a str>,
    failed: &[aws_sdk_sqs::types::BatchResultErrorEntry],
) -> BatchResult {
    let mut results: BatchResult =
        vec![Err(QueueError::Unavailable("no answer for this entry".into())); len];
    for id in successful {
        if let Some(slot) = id.parse::<usize>().ok().and_then(|i| results.get_mut(i)) {
            *slot = Ok(());
        }
    }
    for entry in failed {
        if let Some(slot) = entry
            .id()
            .parse::<usize>()
            .ok()
            .and_then(|i| results.get_mut(i))
        {
            *slot = Err(batch_error_code(entry.code()));
        }
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipt_handles_quoted_in_aws_errors_are_redacted() {
        let handle =
            "AQEBzJ8x+Yk3/Qm0aZPq7Lw9Rt2Vb6Nc1Hd4Ge5Jf8Ki0Ml3Nn6Oo9Pp2Qq5Rr8Ss1Tt4Uu7Vv0Ww==";
        let text = format!("Value {handle} for parameter ReceiptHandle is invalid. Reason: stale.");
        let redacted = redact_handles(&text);
        assert!(!redacted.contains(&handle[..20]), "{redacted}");
        assert_eq!(
            redacted,
            "Value <redacted> for parameter ReceiptHandle is invalid. Reason: stale."
        );
        assert_eq!(
            redact_handles("AWS.SimpleQueueService.NonExistentQueue: gone"),
            "AWS.SimpleQueueService.NonExistentQueue: gone"
        );
    }

    #[test]
    fn visibility_rounds_up_to_whole_seconds() {
        assert_eq!(secs(Duration::ZERO), 0);
        assert_eq!(secs(Duration::from_millis(700)), 1);
        assert_eq!(secs(Duration::from_millis(2000)), 2);
        assert_eq!(secs(Duration::from_millis(2001)), 3);
    }

    #[test]
    fn batch_entries_map_back_to_their_requests() {
        let failed = aws_sdk_sqs::types::BatchResultErrorEntry::builder()
            .id("1")
            .code("ReceiptHandleIsInvalid")
            .sender_fault(true)
            .build()
            .unwrap();
        let results = batch_results(3, ["0"].into_iter(), &[failed]);
        assert_eq!(results[0], Ok(()));
        assert_eq!(results[1], Err(QueueError::InvalidReceiptHandle));
        assert!(
            results[2].is_err(),
            "an entry with no answer is not a success"
        );
    }
}
