//! The accept loop: one HTTP/1 connection per client, a deadline for request headers, graceful shutdown.
//!
//! A connection that never sends a complete request head is closed after the header timeout, so
//! half-open or idle sockets cannot pile up until the process runs out of file descriptors and real
//! clients are no longer accepted (`axum::serve` sets no such deadline). The deadline only runs while
//! the server waits for a request head: a long response such as the `/event` stream is not affected.
//!
//! Owns: accepting, per-connection settings (TCP_NODELAY, header timeout), draining on shutdown.
//! Must not: know routes, auth or engine state (the router and `serve` do).

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Pause after an accept error that is not about one connection (e.g. out of file descriptors), so the
/// loop does not spin while the header timeout frees descriptors.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting, asks every connection to
/// finish its current request and waits for all of them to close.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    header_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    tokio::pin!(shutdown);
    let stop = CancellationToken::new();
    // Every connection task holds a receiver; `closed()` resolves once the last one is dropped.
    let (open_tx, open_rx) = watch::channel(());
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                tracing::warn!("cannot accept a connection: {e}");
                tokio::select! {
                    () = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                    () = &mut shutdown => break,
                }
            }
        };
        tokio::spawn(connection(tcp, app.clone(), header_timeout, stop.clone(), open_rx.clone()));
    }
    drop(listener);
    stop.cancel();
    drop(open_rx);
    open_tx.closed().await;
    Ok(())
}

async fn connection(
    tcp: TcpStream,
    app: Router,
    header_timeout: Duration,
    stop: CancellationToken,
    _open: watch::Receiver<()>,
) {
    // Events are small writes; Nagle would hold them back.
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!("cannot set TCP_NODELAY: {e}");
    }
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(header_timeout);
    let conn = builder.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(app));
    tokio::pin!(conn);
    let result = tokio::select! {
        result = conn.as_mut() => result,
        () = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        // Header timeouts and clients that hang up land here; neither is the server's problem.
        tracing::debug!("connection ended: {e}");
    }
}

/// Errors that concern one connection only (the next accept may well succeed).
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}
