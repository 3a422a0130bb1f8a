//! Run leases (DESIGN.md §5b): the PostgreSQL form of run ownership. One `run_lease` row per running
//! session names its owner and an expiry in database time; the owner renews it every third of the lease,
//! and deletes it when the run ends. A worker that dies stops renewing, so the lease expires and any
//! other worker may take the session over (the run's start then settles what the dead one left open).
//!
//! Owns: taking a lease atomically, renewing it in the background, releasing it, noticing it was lost.
//! Must not: wait for a busy session, or settle runs (recovery does).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a run lease lasts without renewal (`[store] lease_secs`); the holder renews it every third.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);

use codeloop_types::SessionId;
use tokio::sync::oneshot;

use super::{Shared, block_on};
use crate::{Result, RunOwnership, StoreError};

/// Takes the lease when there is none or it has expired: one statement, so two workers cannot both win.
pub(crate) const TAKE: &str = "INSERT INTO run_lease (session_id, owner, expires_at)
     VALUES ($1, $2, clock_timestamp() + make_interval(secs => $3))
     ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
         WHERE run_lease.expires_at < clock_timestamp()
     RETURNING owner";
const RENEW: &str = "UPDATE run_lease SET expires_at = clock_timestamp() + make_interval(secs => $3)
     WHERE session_id = $1 AND owner = $2";
pub(crate) const RELEASE: &str = "DELETE FROM run_lease WHERE session_id = $1 AND owner = $2";

/// How long dropping a lease waits for its row to be deleted; past that it expires on its own.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// A name no other holder has: host, process, and a random part (two runs in one process differ too).
pub(crate) fn new_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    format!("{host}:{}:{:016x}", std::process::id(), fastrand::u64(..))
}

pub(crate) fn seconds(lease: Duration) -> f64 {
    lease.as_secs_f64()
}

/// Fails with `LeaseLost` unless every `(session, owner)` lease row is still ours. The rows are locked
/// (FOR SHARE) until the caller's transaction ends, so a takeover waits for that commit: the new owner
/// then sees these writes, and no write of the old owner lands after it took over.
pub(crate) async fn check_fence(
    tx: &deadpool_postgres::Transaction<'_>,
    fenced: &[(SessionId, String)],
) -> Result<()> {
    if fenced.is_empty() {
        return Ok(());
    }
    let sessions: Vec<&str> = fenced.iter().map(|(s, _)| s.as_str()).collect();
    let owners: Vec<&str> = fenced.iter().map(|(_, o)| o.as_str()).collect();
    let stmt = tx
        .prepare_cached(
            "SELECT l.session_id FROM run_lease l
             JOIN unnest($1::text[], $2::text[]) AS mine (session_id, owner)
               ON l.session_id = mine.session_id AND l.owner = mine.owner
             FOR SHARE OF l",
        )
        .await?;
    let still: Vec<String> = tx
        .query(&stmt, &[&sessions, &owners])
        .await?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    match fenced.iter().find(|(session, _)| !still.iter().any(|s| s == session.as_str())) {
        Some((session, _)) => Err(StoreError::LeaseLost(session.clone())),
        None => Ok(()),
    }
}

/// A held lease. Dropping it stops the renewal and deletes the row.
pub(crate) struct Lease {
    session: SessionId,
    owner: String,
    held: Arc<AtomicBool>,
    stop: Option<oneshot::Sender<()>>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("session", &self.session).field("owner", &self.owner).finish()
    }
}

impl RunOwnership for Lease {
    fn session_id(&self) -> &SessionId {
        &self.session
    }

    fn is_held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }
}

impl Lease {
    /// Takes the lease of `session` or fails with `SessionBusy`; never waits for the holder.
    pub(crate) fn take(shared: &Arc<Shared>, session: &SessionId) -> Result<Lease> {
        let owner = new_owner();
        let lease = shared.lease;
        let taken = {
            let (session, owner) = (session.clone(), owner.clone());
            let pool = shared.clone();
            block_on(&shared.handle, async move {
                let client = pool.client().await?;
                let stmt = client.prepare_cached(TAKE).await?;
                let row = client.query_opt(&stmt, &[&session.as_str(), &owner, &seconds(lease)]).await?;
                Ok(row.is_some())
            })?
        };
        if !taken {
            return Err(StoreError::SessionBusy(session.clone()));
        }
        shared.held().insert(session.clone(), owner.clone());
        let held = Arc::new(AtomicBool::new(true));
        let (stop, stopped) = oneshot::channel();
        shared.handle.spawn(renew(shared.clone(), session.clone(), owner.clone(), held.clone(), stopped));
        Ok(Lease { session: session.clone(), owner, held, stop: Some(stop), shared: shared.clone() })
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        {
            let mut held = self.shared.held();
            if held.get(&self.session) == Some(&self.owner) {
                held.remove(&self.session);
            }
        }
        let (session, owner, shared) = (self.session.clone(), self.owner.clone(), self.shared.clone());
        let release = async move {
            let client = shared.client().await?;
            let stmt = client.prepare_cached(RELEASE).await?;
            client.execute(&stmt, &[&session.as_str(), &owner]).await?;
            Ok(())
        };
        let timed = async move {
            tokio::time::timeout(RELEASE_TIMEOUT, release)
                .await
                .unwrap_or_else(|_| Err(StoreError::Interrupted("releasing a run lease timed out".into())))
        };
        if let Err(error) = block_on(&self.shared.handle, timed) {
            tracing::warn!(session = %self.session, %error, "could not release a run lease; it will expire");
        }
    }
}

/// Renews the lease every third of its length until stopped. It is lost when the row is gone or taken
/// (another worker saw it expire), or when no renewal succeeded for a whole lease length.
async fn renew(
    shared: Arc<Shared>,
    session: SessionId,
    owner: String,
    held: Arc<AtomicBool>,
    mut stop: oneshot::Receiver<()>,
) {
    let period = shared.lease / 3;
    let mut deadline = Instant::now() + shared.lease;
    loop {
        tokio::select! {
            _ = &mut stop => return,
            () = tokio::time::sleep(period) => {}
        }
        let started = Instant::now();
        let renewed = async {
            let client = shared.client().await?;
            let stmt = client.prepare_cached(RENEW).await?;
            Ok::<_, StoreError>(
                client.execute(&stmt, &[&session.as_str(), &owner, &seconds(shared.lease)]).await? == 1,
            )
        };
        match tokio::time::timeout(period.max(Duration::from_millis(100)), renewed).await {
            Ok(Ok(true)) => {
                deadline = started + shared.lease;
                shared.lease_renewals.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Ok(false)) => {
                tracing::warn!(%session, "the run lease was taken over by another worker");
                shared.leases_lost.fetch_add(1, Ordering::Relaxed);
                held.store(false, Ordering::Release);
                return;
            }
            Ok(Err(error)) => tracing::warn!(%session, %error, "could not renew the run lease"),
            Err(_) => tracing::warn!(%session, "renewing the run lease timed out"),
        }
        if Instant::now() >= deadline {
            tracing::warn!(%session, "the run lease expired before it could be renewed");
            shared.leases_lost.fetch_add(1, Ordering::Relaxed);
            held.store(false, Ordering::Release);
            return;
        }
    }
}
