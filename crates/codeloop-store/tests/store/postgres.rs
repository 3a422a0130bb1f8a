//! PostgreSQL only: URLs, leases across workers, schema versions.

use super::*;
use pretty_assertions::assert_eq;

// ---------------------------------------------------------------------------------------------------------
// PostgreSQL only: URLs, leases across workers, schema versions

/// Runs one statement on `url` outside any store, as an operator (or another program) would.
pub(super) fn sql(url: &str, statement: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        client.batch_execute(statement).await.unwrap();
    });
}

pub(super) fn postgres_url() -> Option<String> {
    match Place::new(Kind::Postgres)? {
        Place::Postgres(url) => Some(url),
        Place::Sqlite(_) => None,
    }
}

#[test]
pub(super) fn postgres_a_bad_or_unreachable_url_is_a_clear_error_that_hides_the_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let error =
        PgStore::open(&format!("postgres://codeloop:hunter2@127.0.0.1:{port}/db"), TEST_LEASE).unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, StoreError::Unavailable { .. }), "{text}");
    assert!(text.contains(&format!("postgres://codeloop:***@127.0.0.1:{port}/db")), "{text}");
    assert!(text.contains("CODELOOP_DATABASE_URL"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");

    let error = PgStore::open("postgres://codeloop:hunter2@127.0.0.1:notaport/db", TEST_LEASE).unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, StoreError::InvalidUrl { .. }), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}

#[test]
pub(super) fn postgres_an_expired_lease_is_taken_over_and_its_holder_learns_it_lost_it() {
    let Some(url) = postgres_url() else { return };
    let (a, b) = (PgStore::open(&url, TEST_LEASE).unwrap(), PgStore::open(&url, TEST_LEASE).unwrap());
    let id = SessionId::new();
    let lease = a.lock_session(&id).unwrap();
    assert!(lease.is_held());
    assert!(matches!(b.lock_session(&id), Err(StoreError::SessionBusy(busy)) if busy == id));

    // A worker that stopped renewing (paused, cut off) leaves an expired row: another worker takes it.
    sql(&url, "UPDATE run_lease SET expires_at = clock_timestamp() - interval '1 second'");
    let taken = b.lock_session(&id).unwrap();
    let started = Instant::now();
    while lease.is_held() {
        assert!(started.elapsed() < TEST_LEASE * 2, "the old holder never noticed it lost its lease");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Dropping the lost lease leaves the new holder's row alone.
    drop(lease);
    assert!(matches!(a.lock_session(&id), Err(StoreError::SessionBusy(_))));
    assert!(taken.is_held());
    drop(taken);
    let _again = a.lock_session(&id).unwrap();
}

#[test]
pub(super) fn postgres_a_held_lease_is_renewed_past_its_length() {
    let Some(url) = postgres_url() else { return };
    let (a, b) = (PgStore::open(&url, TEST_LEASE).unwrap(), PgStore::open(&url, TEST_LEASE).unwrap());
    let id = SessionId::new();
    let lease = a.lock_session(&id).unwrap();
    std::thread::sleep(TEST_LEASE + TEST_LEASE / 2);
    assert!(lease.is_held());
    assert!(matches!(b.lock_session(&id), Err(StoreError::SessionBusy(_))));
}

#[test]
pub(super) fn postgres_a_database_from_a_newer_codeloop_is_refused() {
    let Some(url) = postgres_url() else { return };
    drop(PgStore::open(&url, TEST_LEASE).unwrap());
    sql(&url, "UPDATE codeloop_schema SET version = version + 1");
    let error = PgStore::open(&url, TEST_LEASE).unwrap_err();
    assert!(matches!(error, StoreError::SchemaTooNew { .. }), "{error}");
}

#[test]
pub(super) fn postgres_workers_see_every_workers_events_in_one_increasing_id_order() {
    let Some(url) = postgres_url() else { return };
    let workers: Vec<PgStore> = (0..2).map(|_| PgStore::open(&url, TEST_LEASE).unwrap()).collect();
    let mut outboxes = Vec::new();
    let mut inboxes = Vec::new();
    for worker in &workers {
        let (outbox, rx) = tokio::sync::mpsc::unbounded_channel();
        let (seen, inbox) = std::sync::mpsc::channel::<(u64, String)>();
        let seen = std::sync::Mutex::new(seen);
        let sink: codeloop_store::EventSink =
            Box::new(move |id, json| drop(seen.lock().unwrap().send((id, json))));
        let outbox_of = codeloop_store::Outbox { events: rx, pending: Default::default() };
        worker.event_log().unwrap().relay(outbox_of, sink).unwrap();
        outboxes.push(outbox);
        inboxes.push(inbox);
    }
    // Both workers publish at once.
    for n in 0..50 {
        for (w, outbox) in outboxes.iter().enumerate() {
            outbox.send(json!({"worker": w, "n": n}).to_string()).unwrap();
        }
    }
    let received: Vec<Vec<(u64, String)>> = inboxes
        .iter()
        .map(|inbox| (0..100).map(|_| inbox.recv_timeout(Duration::from_secs(10)).unwrap()).collect())
        .collect();
    assert_eq!(received[0], received[1], "every worker sees the same events with the same ids");
    let ids: Vec<u64> = received[0].iter().map(|(id, _)| *id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    // Each worker's own events keep their order.
    for w in 0..2 {
        let mine: Vec<u64> = received[0]
            .iter()
            .map(|(_, json)| serde_json::from_str::<serde_json::Value>(json).unwrap())
            .filter(|e| e["worker"] == w)
            .map(|e| e["n"].as_u64().unwrap())
            .collect();
        assert_eq!(mine, (0..50).collect::<Vec<_>>());
    }
}

#[test]
pub(super) fn postgres_a_worker_that_lost_its_lease_can_no_longer_write_the_session() {
    let Some(url) = postgres_url() else { return };
    let (a, b) = (PgStore::open(&url, TEST_LEASE).unwrap(), PgStore::open(&url, TEST_LEASE).unwrap());
    let s = session("/p");
    a.apply(&[Write::Session(s.clone())]).unwrap();
    let lease = a.lock_session(&s.id).unwrap();
    let question = user(&s.id);
    a.apply(&[Write::Message(question.clone())]).unwrap();

    // Another worker takes the session over once the lease has expired (a paused or cut-off worker).
    sql(&url, "UPDATE run_lease SET expires_at = clock_timestamp() - interval '1 second'");
    let _taken = b.lock_session(&s.id).unwrap();
    let late = a.apply(&[Write::Part(part(&question, text_kind("written after losing the session")))]);
    assert!(matches!(&late, Err(StoreError::LeaseLost(id)) if id == &s.id), "{late:?}");
    assert_eq!(b.load_history(&s.id).unwrap()[0].parts, vec![]);
    // Its other sessions are not affected.
    a.apply(&[Write::Session(session("/q"))]).unwrap();
    drop(lease);
}

#[test]
pub(super) fn postgres_the_store_keeps_working_after_its_connections_are_cut() {
    let Some(url) = postgres_url() else { return };
    let store = PgStore::open(&url, TEST_LEASE).unwrap();
    let session = codeloop_types::Session::new("/p", "build", None);
    store.apply(&[Write::Session(session.clone())]).unwrap();
    // What a database restart (or a failover of a managed database) does to every open connection.
    sql(
        &url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name = 'codeloop' AND pid <> pg_backend_pid()",
    );
    // The next calls get fresh connections: nothing fails because the pool held dead ones.
    let mut renamed = session.clone();
    renamed.title = "after the cut".into();
    store.apply(&[Write::Session(renamed)]).unwrap();
    assert_eq!(store.get_session(&session.id).unwrap().unwrap().title, "after the cut");
}
