//! Building the application (ledger connected and migrated, listener bound) and running it
//! until a shutdown signal, then draining in-flight requests.

use std::future::Future;
use std::net::SocketAddr;

use tokio::net::TcpListener;

use crate::http::{self, AppState};
use crate::ledger::{Ledger, LedgerError, LedgerOptions};

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("cannot open the ledger")]
    Ledger(#[from] LedgerError),
    #[error("cannot listen on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// A built, not yet running, application.
pub struct Application {
    listener: TcpListener,
    router: axum::Router,
    ledger: Ledger,
    addr: SocketAddr,
}

impl Application {
    /// Connects and migrates the ledger, then binds `bind` (port 0 picks a free port).
    pub async fn build(
        database_url: &str,
        options: &LedgerOptions,
        bind: SocketAddr,
        max_body_bytes: usize,
    ) -> Result<Application, StartupError> {
        let ledger = Ledger::connect(database_url, options).await?;
        ledger.migrate().await?;
        let listener = TcpListener::bind(bind)
            .await
            .map_err(|source| StartupError::Bind { addr: bind, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| StartupError::Bind { addr: bind, source })?;
        let router = http::router(AppState {
            ledger: ledger.clone(),
            max_body_bytes,
        });
        Ok(Application {
            listener,
            router,
            ledger,
            addr,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Serves until `shutdown` resolves, then lets in-flight requests finish.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let result = axum::serve(self.listener, self.router)
            .with_graceful_shutdown(shutdown)
            .await;
        self.ledger.close().await;
        result
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("Ctrl-C received; shutting down"),
        _ = terminate => tracing::info!("SIGTERM received; shutting down"),
    }
}
