//! SSE frames: `id: N\nevent: message\ndata: {json}\n\n` for bus events, and the control events the
//! stream adds itself (`server.connected`, `server.heartbeat`, `resync`, `server.instance.disposed`).
//!
//! Owns: the byte encoding, and a small cache so an event fanned out to many clients is serialised once.
//! Must not: decide which client gets what (that is the stream's job).

use std::sync::Mutex;

use bytes::Bytes;
use codeloop_types::Event;
use codeloop_types::LockExt;
use serde_json::{Value, json};

/// Slots of the frame cache; an event's slot is `id % SLOTS`.
const SLOTS: usize = 512;
/// Larger frames (full tool outputs) are not cached, so the cache stays under `SLOTS × 4 KiB`.
const MAX_CACHED_FRAME: usize = 4 * 1024;

/// One cached frame: the event id and its bytes.
type Slot = Mutex<Option<(u64, Bytes)>>;

/// Encoded frames of recent events, shared by every stream.
pub struct FrameCache {
    slots: Box<[Slot]>,
}

impl Default for FrameCache {
    fn default() -> Self {
        Self { slots: (0..SLOTS).map(|_| Mutex::new(None)).collect() }
    }
}

impl FrameCache {
    /// The frame of a bus event, serialised at most once while it stays in its slot.
    pub fn frame(&self, event: &Event) -> Bytes {
        let slot = &self.slots[(event.id % SLOTS as u64) as usize];
        if let Some((id, bytes)) = &*slot.locked()
            && *id == event.id
        {
            return bytes.clone();
        }
        let bytes = encode(Some(event.id), event);
        if bytes.len() <= MAX_CACHED_FRAME {
            *slot.locked() = Some((event.id, bytes.clone()));
        }
        bytes
    }
}

fn encode(id: Option<u64>, data: &impl serde::Serialize) -> Bytes {
    let mut out = Vec::with_capacity(256);
    if let Some(id) = id {
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(id.to_string().as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"event: message\ndata: ");
    // Compact JSON escapes newlines inside strings, so the data stays on one line.
    if serde_json::to_writer(&mut out, data).is_err() {
        out.extend_from_slice(br#"{"type":"server.error","properties":{}}"#);
    }
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// A control event. With an `id`, it also moves the client's `Last-Event-ID`.
pub fn control(id: Option<u64>, kind: &str, properties: Value) -> Bytes {
    let mut data = json!({"type": kind, "properties": properties});
    if let (Some(id), Some(object)) = (id, data.as_object_mut()) {
        object.insert("id".into(), json!(id));
    }
    encode(id, &data)
}

/// Why a client must refetch state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum ResyncReason {
    /// `Last-Event-ID` is older than the replay buffer.
    TooFarBehind,
    /// The client read too slowly and the events it missed left the replay buffer.
    Lagged,
    /// `Last-Event-ID` is newer than anything this server published (it restarted).
    UnknownId,
}

impl ResyncReason {
    fn as_str(self) -> &'static str {
        self.into()
    }
}

/// `resync`: events were lost for this client; it must refetch what it shows. Carries no `id`, so a
/// client that reconnects before refetching is told again.
pub fn resync(reason: ResyncReason, last_event_id: u64) -> Bytes {
    control(
        None,
        "resync",
        json!({
            "reason": reason.as_str(),
            "last_event_id": last_event_id,
            "message": "events were missed: refetch sessions and messages, then apply new events",
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use codeloop_types::EventPayload;

    #[test]
    fn frames_are_sse_with_id_and_one_data_line() {
        let cache = FrameCache::default();
        let event = Event { id: 42, payload: EventPayload::SessionIdle { session_id: "ses_1\nx".into() } };
        let frame = cache.frame(&event);
        let text = std::str::from_utf8(&frame).unwrap();
        assert!(text.starts_with("id: 42\nevent: message\ndata: {\"id\":42,\"type\":\"session.idle\""));
        assert!(text.ends_with("\n\n"));
        assert_eq!(text.matches('\n').count(), 4);
        assert_eq!(cache.frame(&event), frame);
    }

    #[test]
    fn control_frames_without_id_leave_last_event_id_alone() {
        let frame = resync(ResyncReason::Lagged, 7);
        let text = std::str::from_utf8(&frame).unwrap();
        assert!(text.starts_with("event: message\ndata: {"));
        assert!(text.contains("\"type\":\"resync\""));
    }
}
