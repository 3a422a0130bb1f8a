//! The response body of a streamed answer: sends the pre-rendered chunks one frame each (with the scripted
//! delay), then ends the way the plan says — cleanly, by aborting the connection, or by going silent.
//! Every wait also watches the server's shutdown signal, so stopping the server never hangs on a stream.

use std::io;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use tokio::sync::watch;

use crate::plan::{Ending, StreamPlan};

/// Time given to hyper to flush what was sent before an injected reset. hyper drops its unflushed write
/// buffer when a body fails, so without this pause the client could see fewer chunks than scripted.
const FLUSH_BEFORE_RESET: Duration = Duration::from_millis(20);

pub(crate) fn body(plan: StreamPlan, shutdown: watch::Receiver<bool>) -> Body {
    let feed = Feed {
        chunks: plan.chunks.into_iter(),
        delay: plan.delay,
        ending: Some(plan.ending),
        shutdown,
        sent: 0,
    };
    Body::from_stream(futures::stream::unfold(feed, Feed::next))
}

struct Feed {
    chunks: std::vec::IntoIter<Bytes>,
    delay: Duration,
    /// `None` once the ending has happened.
    ending: Option<Ending>,
    shutdown: watch::Receiver<bool>,
    sent: usize,
}

impl Feed {
    async fn next(mut self) -> Option<(io::Result<Bytes>, Feed)> {
        if let Some(chunk) = self.chunks.next() {
            if self.sent > 0 && !self.delay.is_zero() && !self.wait(self.delay).await {
                return self.stop(server_stopped());
            }
            self.sent += 1;
            return Some((Ok(chunk), self));
        }
        match self.ending.take()? {
            Ending::Clean => None,
            Ending::Reset => {
                self.wait(FLUSH_BEFORE_RESET).await;
                let reset = io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    "fake provider: injected connection reset",
                );
                Some((Err(reset), self))
            }
            Ending::Stall => {
                // Silent until the client disconnects (hyper then drops this body) or the server stops.
                let _ = self.shutdown.wait_for(|stopped| *stopped).await;
                Some((Err(server_stopped()), self))
            }
        }
    }

    /// Sleeps for `duration`; false if the server stopped first.
    async fn wait(&mut self, duration: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(duration) => true,
            _ = self.shutdown.wait_for(|stopped| *stopped) => false,
        }
    }

    fn stop(mut self, error: io::Error) -> Option<(io::Result<Bytes>, Feed)> {
        self.ending = None;
        self.chunks = Vec::new().into_iter();
        Some((Err(error), self))
    }
}

fn server_stopped() -> io::Error {
    io::Error::other("fake provider: server stopped")
}
