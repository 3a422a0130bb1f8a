//! From response body bytes to [`StreamEvent`]s: the body goes through `eventsource-stream` (the SSE
//! parser) into a per-format [`Decoder`], with an idle timeout between chunks.
//!
//! Owns: the [`Decoder`] contract, the idle timeout, mapping transport failures to [`ProviderError`].
//! Must not: know any wire format (that is the decoders' job).

use std::collections::VecDeque;
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use eventsource_stream::{EventStreamError, Eventsource};
use futures::Stream;

use crate::{EventStream, ProviderError, StreamEvent};

/// A wire format's stream decoder: a plain synchronous state machine fed one dispatched SSE event at a
/// time, so tests can replay recorded bodies without HTTP.
pub trait Decoder: Send {
    /// One SSE event (`event_type` is `"message"` when the event had no `event:` line). Events pushed
    /// into `out` before an `Err` is returned are still delivered, then the stream ends with the error.
    fn event(
        &mut self,
        event_type: &str,
        data: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), ProviderError>;

    /// The body ended. Emits the closing events if the provider finished (even when its terminal
    /// marker was cut off), else returns [`ProviderError::Stream`].
    fn end(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), ProviderError>;

    /// True once [`StreamEvent::Finish`] was emitted; the rest of the body is not read.
    fn finished(&self) -> bool;
}

/// The error a decoder returns when the body stops before the provider said it was done.
pub(crate) fn ended_early() -> ProviderError {
    ProviderError::Stream { message: "stream ended before the provider finished".into() }
}

/// Decodes a response body into events. `idle_timeout` is the longest the body may stay silent
/// between two chunks ([`ProviderError::IdleTimeout`]); a transport failure mid-body becomes
/// [`ProviderError::Connection`]. Needs a tokio runtime only if the body ever has to be waited for.
pub fn decode_sse<S, E>(body: S, decoder: Box<dyn Decoder>, idle_timeout: Duration) -> EventStream
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Display + Send + 'static,
{
    let body = Body {
        inner: Box::pin(body),
        bom: Bom::Checking(Vec::new()),
        idle_timeout,
        timer: None,
        fresh: true,
        rest: Bytes::new(),
        partial: BytesMut::new(),
        trailing_cr: false,
    };
    Box::pin(Decoding {
        events: Box::pin(body.eventsource()),
        decoder,
        pending: VecDeque::new(),
        out: Vec::new(),
        done: false,
    })
}

type SseEvents =
    Pin<Box<dyn Stream<Item = Result<eventsource_stream::Event, EventStreamError<BodyError>>> + Send>>;

struct Decoding {
    events: SseEvents,
    decoder: Box<dyn Decoder>,
    pending: VecDeque<Result<StreamEvent, ProviderError>>,
    /// The decoder's output buffer, kept to reuse its allocation.
    out: Vec<StreamEvent>,
    done: bool,
}

impl Decoding {
    fn push(&mut self, result: Result<(), ProviderError>) {
        self.pending.extend(self.out.drain(..).map(Ok));
        if let Err(error) = result {
            self.pending.push_back(Err(error));
            self.done = true;
        }
        if self.decoder.finished() {
            self.done = true;
        }
    }
}

impl Stream for Decoding {
    type Item = Result<StreamEvent, ProviderError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(item) = this.pending.pop_front() {
                return Poll::Ready(Some(item));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match this.events.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(event))) => {
                    let result = this.decoder.event(&event.event, &event.data, &mut this.out);
                    this.push(result);
                }
                Poll::Ready(Some(Err(error))) => {
                    // A connection cut after the provider said it was done (a finish reason, then a reset
                    // instead of a clean close) loses nothing: end normally so the finished answer and its
                    // tool calls are kept instead of retried.
                    let result = match error {
                        EventStreamError::Transport(_) if this.decoder.end(&mut this.out).is_ok() => Ok(()),
                        error => Err(sse_error(error)),
                    };
                    this.push(result);
                    this.done = true;
                }
                Poll::Ready(None) => {
                    let result = this.decoder.end(&mut this.out);
                    this.push(result);
                    this.done = true;
                }
            }
        }
    }
}

fn sse_error(error: EventStreamError<BodyError>) -> ProviderError {
    match error {
        EventStreamError::Transport(BodyError::Idle(after)) => ProviderError::IdleTimeout(after),
        EventStreamError::Transport(BodyError::Transport(message)) => ProviderError::Connection { message },
        EventStreamError::Utf8(e) => ProviderError::Stream { message: format!("the body is not UTF-8: {e}") },
        EventStreamError::Parser(e) => ProviderError::Stream { message: format!("malformed SSE: {e}") },
    }
}

#[derive(Debug)]
enum BodyError {
    Transport(String),
    Idle(Duration),
}

impl Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::Transport(message) => f.write_str(message),
            BodyError::Idle(after) => write!(f, "idle for {after:?}"),
        }
    }
}

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Whether the body's leading byte-order mark has been dealt with. eventsource-stream 0.2 slices a
/// leading BOM off at byte 1 (it is 3 bytes) and panics, so it is removed here first.
enum Bom {
    Checking(Vec<u8>),
    Done,
}

/// The raw body with its idle timeout and leading BOM removed.
struct Body<S> {
    inner: Pin<Box<S>>,
    bom: Bom,
    idle_timeout: Duration,
    /// Created the first time the body has to be waited for, so replaying an in-memory body needs no
    /// runtime.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// A chunk arrived since the timer was last armed.
    fresh: bool,
    /// Complete lines not yet handed on (one event at a time).
    rest: Bytes,
    /// The start of a line whose end has not arrived yet.
    partial: BytesMut,
    /// The body so far ends in `\r`, which the parser holds until it knows whether `\n` follows.
    trailing_cr: bool,
}

impl<S, E> Body<S>
where
    S: Stream<Item = Result<Bytes, E>>,
    E: Display,
{
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BodyError>>> {
        let deadline = tokio::time::Instant::now() + self.idle_timeout;
        let timer = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if self.fresh {
            timer.as_mut().reset(deadline);
            self.fresh = false;
        }
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(BodyError::Idle(self.idle_timeout)))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Strips a leading BOM, holding back the first bytes until there are enough to tell.
    fn strip_bom(&mut self, chunk: Bytes) -> Option<Bytes> {
        let Bom::Checking(held) = &mut self.bom else { return Some(chunk) };
        let chunk = if held.is_empty() {
            chunk
        } else {
            held.extend_from_slice(&chunk);
            Bytes::from(std::mem::take(held))
        };
        if chunk.len() < UTF8_BOM.len() && UTF8_BOM.starts_with(&chunk) {
            self.bom = Bom::Checking(chunk.to_vec());
            return None;
        }
        self.bom = Bom::Done;
        if chunk.starts_with(UTF8_BOM) { Some(chunk.slice(UTF8_BOM.len()..)) } else { Some(chunk) }
    }
}

/// Takes in a chunk: the complete lines go to `rest`, a trailing partial line is held back. The parser
/// rescans an unfinished line from its start on every chunk, so a long line (a 30 KB search result)
/// arriving in small pieces would cost quadratic time.
fn take_lines(rest: &mut Bytes, partial: &mut BytesMut, chunk: Bytes) {
    let Some(last_end) = chunk.iter().rposition(|&b| b == b'\n' || b == b'\r') else {
        partial.extend_from_slice(&chunk);
        return;
    };
    let (lines, tail) = (chunk.slice(..=last_end), chunk.slice(last_end + 1..));
    *rest = if partial.is_empty() {
        lines
    } else {
        partial.extend_from_slice(&lines);
        partial.split().freeze()
    };
    partial.extend_from_slice(&tail);
}

/// Splits off the bytes up to and including the first event end (`\n\n` or `\n\r\n`), or the whole
/// chunk if there is none. eventsource-stream copies its unparsed buffer once per line, so a large
/// read (many events at once, as from a fast local server) costs quadratic time unless it is fed one
/// event at a time. Any split is safe: the parser handles arbitrary chunk boundaries.
fn next_event(rest: &mut Bytes) -> Bytes {
    let bytes = rest.as_ref();
    let mut end = bytes.len();
    let mut i = 0;
    while let Some(offset) = bytes[i..].iter().position(|&b| b == b'\n') {
        let at = i + offset;
        match bytes.get(at + 1..) {
            Some([b'\n', ..]) => {
                end = at + 2;
                break;
            }
            Some([b'\r', b'\n', ..]) => {
                end = at + 3;
                break;
            }
            _ => i = at + 1,
        }
    }
    rest.split_to(end)
}

impl<S, E> Stream for Body<S>
where
    S: Stream<Item = Result<Bytes, E>>,
    E: Display,
{
    type Item = Result<Bytes, BodyError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if !this.rest.is_empty() {
                return Poll::Ready(Some(Ok(next_event(&mut this.rest))));
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    this.fresh = true;
                    if let Some(&last) = chunk.last() {
                        this.trailing_cr = last == b'\r';
                    }
                    if let Some(chunk) = this.strip_bom(chunk) {
                        take_lines(&mut this.rest, &mut this.partial, chunk);
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    return Poll::Ready(Some(Err(BodyError::Transport(e.to_string()))));
                }
                Poll::Ready(None) => {
                    // An unfinished last line goes to the parser, which drops it as the spec says.
                    if !this.partial.is_empty() {
                        return Poll::Ready(Some(Ok(this.partial.split().freeze())));
                    }
                    // A `\r` at the very end ends its line (`\r\n` is one line end, so a `\n` after it
                    // changes nothing else): the last event of a CR-only body is dispatched.
                    if std::mem::take(&mut this.trailing_cr) {
                        return Poll::Ready(Some(Ok(Bytes::from_static(b"\n"))));
                    }
                    // A body shorter than a BOM: hand over what was held back.
                    if let Bom::Checking(held) = std::mem::replace(&mut this.bom, Bom::Done)
                        && !held.is_empty()
                    {
                        return Poll::Ready(Some(Ok(Bytes::from(held))));
                    }
                    return Poll::Ready(None);
                }
                Poll::Pending => return this.poll_idle(cx),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use std::convert::Infallible;

    /// The framing under test, without any provider's format: each event's data is a text delta,
    /// `[DONE]` finishes, and a body that ends before it is cut off.
    #[derive(Default)]
    struct Echo {
        done: bool,
    }

    impl Decoder for Echo {
        fn event(&mut self, _: &str, data: &str, out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
            if data == "[DONE]" {
                self.done = true;
                out.push(StreamEvent::Finish);
            } else {
                out.push(StreamEvent::TextDelta { id: "t".into(), text: data.to_owned() });
            }
            Ok(())
        }

        fn end(&mut self, _: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
            if self.done { Ok(()) } else { Err(ProviderError::Stream { message: "cut off".into() }) }
        }

        fn finished(&self) -> bool {
            self.done
        }
    }

    #[tokio::test(start_paused = true)]
    async fn silence_between_chunks_is_an_idle_timeout() {
        let first = Bytes::from_static(b"data: Hel\n\n");
        let body = futures::stream::iter([Ok::<_, Infallible>(first)]).chain(futures::stream::pending());
        let items: Vec<_> =
            decode_sse(body, Box::new(Echo::default()), Duration::from_secs(120)).collect().await;
        assert!(items.iter().any(|i| matches!(i, Ok(StreamEvent::TextDelta { text, .. }) if text == "Hel")));
        assert_eq!(items.last(), Some(&Err(ProviderError::IdleTimeout(Duration::from_secs(120)))));
    }

    #[tokio::test(start_paused = true)]
    async fn chunks_keep_the_stream_alive() {
        // Two chunks 100 s apart with a 120 s idle timeout: no timeout.
        let chunks = ["data: a\n\n", "data: [DONE]\n\n"];
        let body = futures::stream::iter(chunks).then(|chunk| async move {
            tokio::time::advance(Duration::from_secs(100)).await;
            Ok::<_, Infallible>(Bytes::from_static(chunk.as_bytes()))
        });
        let items: Vec<_> =
            decode_sse(body, Box::new(Echo::default()), Duration::from_secs(120)).collect().await;
        assert_eq!(items.last(), Some(&Ok(StreamEvent::Finish)));
    }

    fn replay(body: &[u8], chunk: usize) -> Vec<Result<StreamEvent, ProviderError>> {
        let chunks: Vec<_> =
            body.chunks(chunk).map(|c| Ok::<_, Infallible>(Bytes::copy_from_slice(c))).collect();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let decoder = Box::new(Echo::default());
        runtime.block_on(decode_sse(futures::stream::iter(chunks), decoder, Duration::from_secs(1)).collect())
    }

    #[test]
    fn every_line_ending_and_chunking_gives_the_same_events() {
        let body = concat!(": keep-alive comment\n\n", "data: Hé\n\n", "data: llo\n\n", "data: [DONE]\n\n",);
        let expected = replay(body.as_bytes(), body.len());
        assert_eq!(expected.last(), Some(&Ok(StreamEvent::Finish)));
        for ending in ["\r\n", "\r"] {
            let body = body.replace('\n', ending);
            for chunk in [1, 2, 3, 7, 64] {
                assert_eq!(replay(body.as_bytes(), chunk), expected, "{ending:?} in chunks of {chunk}");
            }
        }
    }

    #[test]
    fn transport_failure_is_a_connection_error() {
        let body = futures::stream::iter([Err::<Bytes, _>("connection reset by peer")]);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let items: Vec<_> =
            runtime.block_on(decode_sse(body, Box::new(Echo::default()), Duration::from_secs(1)).collect());
        assert_eq!(
            items,
            vec![Err(ProviderError::Connection { message: "connection reset by peer".into() })]
        );
    }
}
