//! Time-sortable prefixed ids (`ses_`, `msg_`, `prt_`, `per_`, …): 12 hex chars of
//! `timestamp_ms * 4096 + counter` followed by 14 random base-62 chars (reference §1.1).
//!
//! Ascending ids sort oldest first as strings; descending ids (sessions) sort newest first. Within one
//! process the hex part is strictly increasing, so string comparison orders messages and parts.

use crate::LockExt;
use std::sync::Mutex;

const RANDOM_LEN: usize = 14;
const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

static LAST: Mutex<u64> = Mutex::new(0);

fn next_value() -> u64 {
    let now = crate::now_ms().max(0) as u64;
    // A poisoned lock only means another thread panicked mid-update; the counter is still usable.
    let mut last = LAST.locked();
    let value = (now * 4096).max(*last + 1);
    *last = value;
    value
}

fn build(prefix: &str, value: u64) -> String {
    let mut id = String::with_capacity(prefix.len() + 1 + 12 + RANDOM_LEN);
    id.push_str(prefix);
    id.push('_');
    let low48 = value & 0xFFFF_FFFF_FFFF;
    id.push_str(&format!("{low48:012x}"));
    for _ in 0..RANDOM_LEN {
        id.push(ALPHABET[fastrand::usize(..ALPHABET.len())] as char);
    }
    id
}

/// A new id that sorts after every id made before it in this process.
pub fn ascending_id(prefix: &str) -> String {
    build(prefix, next_value())
}

/// A new id that sorts before every id made before it in this process (newest first).
pub fn descending_id(prefix: &str) -> String {
    build(prefix, !next_value())
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $make:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            #[allow(clippy::new_without_default)]
            pub fn new() -> Self {
                Self($make($prefix))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(value: String) -> Self {
                Self(value)
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                Self(value.to_owned())
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

id_type!(
    /// A session id (`ses_…`, descending: newer sessions sort first).
    SessionId, "ses", descending_id
);
id_type!(
    /// A message id (`msg_…`, ascending).
    MessageId, "msg", ascending_id
);
id_type!(
    /// A part id (`prt_…`, ascending).
    PartId, "prt", ascending_id
);
id_type!(
    /// A permission request id (`per_…`, ascending).
    PermissionId, "per", ascending_id
);
id_type!(
    /// A question request id (`que_…`, ascending).
    QuestionId, "que", ascending_id
);
id_type!(
    /// An MCP server's request for input from the person (`eli_…`, ascending: DESIGN.md §5o).
    ElicitationId, "eli", ascending_id
);
id_type!(
    /// A background job id (`job_…`, ascending: DESIGN.md §5f).
    JobId, "job", ascending_id
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascending_ids_sort_in_creation_order() {
        let ids: Vec<String> = (0..10_000).map(|_| ascending_id("msg")).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
        assert!(ids.iter().all(|id| id.len() == 4 + 26 && id.starts_with("msg_")));
    }

    #[test]
    fn descending_ids_sort_newest_first() {
        let ids: Vec<SessionId> = (0..1000).map(|_| SessionId::new()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.reverse();
        assert_eq!(ids, sorted);
    }
}
