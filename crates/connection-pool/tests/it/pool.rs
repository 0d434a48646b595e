//! The pool's behaviour: fairness, no lost or shared connections, replacement, lifetimes, close.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir_connection_pool::{CombinerConfig, Pool, PoolError};

use crate::support::{Lcg, TestManager, settle};

fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

/// Many tasks acquiring with short, seeded timeouts, some marking connections broken: returns
/// the number served and the number timed out.
async fn hammer(pool: &Pool<TestManager>, tasks: u64, rounds: u64) -> (u64, u64) {
    let served = Arc::new(AtomicU64::new(0));
    let timed_out = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let pool = pool.clone();
            let served = Arc::clone(&served);
            let timed_out = Arc::clone(&timed_out);
            tokio::spawn(async move {
                let mut rng = Lcg(task);
                for _ in 0..rounds {
                    let timeout = Duration::from_micros(200 + rng.below(20_000));
                    match pool.acquire_timeout(timeout).await {
                        Ok(mut conn) => {
                            conn.take();
                            for _ in 0..rng.below(3) {
                                tokio::task::yield_now().await;
                            }
                            conn.give_back();
                            if rng.below(50) == 0 {
                                conn.mark_broken();
                            }
                            served.fetch_add(1, SeqCst);
                        }
                        Err(PoolError::Timeout(_)) => {
                            timed_out.fetch_add(1, SeqCst);
                        }
                        Err(other) => panic!("unexpected acquire error: {other}"),
                    }
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.unwrap();
    }
    (served.load(SeqCst), timed_out.load(SeqCst))
}

#[test]
fn every_acquire_is_served_or_times_out_under_contention() {
    runtime(2).block_on(async {
        // One action per run: the combiner yields (and resumes) as often as it possibly can.
        let pool = Pool::builder(TestManager::default())
            .max_size(3)
            .combiner(CombinerConfig::default().max_actions_per_run(1))
            .build();
        let (tasks, rounds) = (48, 150);
        let (served, timed_out) =
            tokio::time::timeout(Duration::from_secs(120), hammer(&pool, tasks, rounds))
                .await
                .expect("acquires were lost: the hammer never finished");
        assert_eq!(served + timed_out, tasks * rounds);
        let metrics = settle(&pool, |m| m.in_use == 0 && m.opening == 0).await;
        assert_eq!(metrics.waiters, 0);
        assert_eq!(metrics.timeouts, timed_out);
        assert_eq!(metrics.acquire_latency.count, served);
        assert!(metrics.idle <= 3);
        assert_eq!(metrics.opened - metrics.closed, metrics.idle as u64);
        pool.close().await;
    });
}

#[test]
fn no_connection_is_handed_to_two_holders_at_once() {
    runtime(2).block_on(async {
        let manager = TestManager::default();
        let ledger = Arc::clone(&manager.ledger);
        let pool = Pool::builder(manager)
            .max_size(4)
            .combiner(CombinerConfig::default().max_actions_per_run(2))
            .build();
        // `take` asserts the per-connection flag inside the hammer.
        tokio::time::timeout(Duration::from_secs(120), hammer(&pool, 32, 150))
            .await
            .expect("the hammer never finished");
        assert!(ledger.most_holders.load(SeqCst) <= 4);
        assert_eq!(ledger.holders.load(SeqCst), 0);
        let all_free = ledger
            .in_use
            .lock()
            .unwrap()
            .values()
            .all(|held| !held.load(SeqCst));
        assert!(all_free, "a connection is still marked held");
        pool.close().await;
    });
}

#[tokio::test(start_paused = true)]
async fn waiters_are_served_in_fifo_order() {
    let pool = Pool::builder(TestManager::default()).max_size(1).build();
    let held = pool.acquire().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..8 {
        let waiter_pool = pool.clone();
        let order = Arc::clone(&order);
        waiters.push(tokio::spawn(async move {
            let conn = waiter_pool.acquire().await.unwrap();
            order.lock().unwrap().push(i);
            drop(conn);
        }));
        // Each waiter is queued before the next one starts.
        settle(&pool, |m| m.waiters == i + 1).await;
    }
    drop(held);
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..8).collect::<Vec<_>>());
}

#[test]
fn a_yield_never_strands_an_acquire() {
    runtime(2).block_on(async {
        // One action per run and plenty of contention: most runs yield. A stranded action would
        // leave its acquire waiting until the (long) timeout, and the test would fail on it.
        let pool = Pool::builder(TestManager::default())
            .max_size(2)
            .acquire_timeout(Duration::from_secs(60))
            .combiner(CombinerConfig::default().max_actions_per_run(1))
            .build();
        let handles: Vec<_> = (0..16)
            .map(|_| {
                let pool = pool.clone();
                tokio::spawn(async move {
                    for _ in 0..200 {
                        drop(pool.acquire().await.unwrap());
                    }
                })
            })
            .collect();
        for handle in handles {
            tokio::time::timeout(Duration::from_secs(120), handle)
                .await
                .expect("an acquire was stranded")
                .unwrap();
        }
        assert_eq!(pool.metrics().acquire_latency.count, 16 * 200);
        assert!(pool.metrics().combiner.longest_run_actions <= 1);
        pool.close().await;
    });
}

#[tokio::test(start_paused = true)]
async fn a_connection_marked_broken_is_closed_and_replaced() {
    let manager = TestManager::default();
    let ledger = Arc::clone(&manager.ledger);
    let pool = Pool::builder(manager).max_size(2).min_idle(1).build();
    settle(&pool, |m| m.idle == 1).await;
    let mut conn = pool.acquire().await.unwrap();
    let first = conn.id;
    conn.mark_broken();
    drop(conn);
    // The idle minimum asks for a replacement.
    let metrics = settle(&pool, |m| m.idle == 1).await;
    assert_eq!((metrics.broken, metrics.closed, metrics.opened), (1, 1, 2));
    assert_eq!(ledger.dropped.load(SeqCst), 1);
    let conn = pool.acquire().await.unwrap();
    assert_ne!(conn.id, first);
}

#[tokio::test(start_paused = true)]
async fn a_broken_connection_is_replaced_for_a_waiter() {
    let pool = Pool::builder(TestManager::default()).max_size(1).build();
    let mut conn = pool.acquire().await.unwrap();
    let waiter = tokio::spawn({
        let pool = pool.clone();
        async move { pool.acquire().await.map(|conn| conn.id) }
    });
    settle(&pool, |m| m.waiters == 1).await;
    conn.mark_broken();
    drop(conn);
    assert_eq!(waiter.await.unwrap().unwrap(), 1);
    assert_eq!(pool.metrics().broken, 1);
}

#[tokio::test(start_paused = true)]
async fn a_connection_failing_its_check_on_return_is_replaced() {
    let manager = TestManager::default();
    manager.failing_checks.lock().unwrap().insert(0);
    let pool = Pool::builder(manager).max_size(1).min_idle(1).build();
    settle(&pool, |m| m.idle == 1).await;
    drop(pool.acquire().await.unwrap());
    let metrics = settle(&pool, |m| m.idle == 1).await;
    assert_eq!((metrics.broken, metrics.opened), (1, 2));
    assert_eq!(pool.acquire().await.unwrap().id, 1);
}

#[tokio::test(start_paused = true)]
async fn a_return_stuck_past_the_check_timeout_is_closed_as_broken_and_replaced() {
    let pool = Pool::builder(TestManager::default())
        .max_size(1)
        .check_timeout(Duration::from_secs(1))
        .build();
    let conn = pool.acquire().await.unwrap();
    pool.manager().hang_recycle.store(true, SeqCst);
    drop(conn);
    let metrics = settle(&pool, |m| m.broken == 1).await;
    assert_eq!((metrics.closed, metrics.in_use), (1, 0));
    assert_eq!(pool.manager().ledger.dropped.load(SeqCst), 1);
    pool.manager().hang_recycle.store(false, SeqCst);
    assert_eq!(pool.acquire().await.unwrap().id, 1);
}

#[tokio::test(start_paused = true)]
async fn a_connect_past_the_connect_timeout_fails_the_waiter_with_a_transient_error() {
    let manager = TestManager::default();
    manager.hang_connect.store(true, SeqCst);
    let pool = Pool::builder(manager)
        .max_size(1)
        .connect_timeout(Duration::from_secs(1))
        .acquire_timeout(Duration::from_secs(5))
        .build();
    let error = pool.acquire().await.unwrap_err();
    assert!(
        matches!(error, PoolError::ConnectTimeout(d) if d == Duration::from_secs(1)),
        "{error}"
    );
    assert_eq!(error.is_transient(), Some(true));
    let metrics = pool.metrics();
    assert_eq!((metrics.connect_failures, metrics.opening), (1, 0));
    pool.manager().hang_connect.store(false, SeqCst);
    assert_eq!(pool.acquire().await.unwrap().id, 0);
}

#[tokio::test(start_paused = true)]
async fn a_return_that_waits_on_io_finishes_in_a_pool_task() {
    let manager = TestManager::default();
    manager.slow_recycle.store(true, SeqCst);
    let pool = Pool::builder(manager).max_size(1).build();
    let conn = pool.acquire().await.unwrap();
    drop(conn);
    // Not back yet: its recycle is waiting for the scheduler.
    assert_eq!(pool.metrics().in_use, 1);
    settle(&pool, |m| m.idle == 1 && m.in_use == 0).await;
    assert_eq!(pool.manager().recycled.load(SeqCst), 1);
    assert_eq!(pool.acquire().await.unwrap().id, 0);
}

#[tokio::test(start_paused = true)]
async fn connections_past_their_max_lifetime_are_closed_and_replaced() {
    let pool = Pool::builder(TestManager::default())
        .max_size(2)
        .min_idle(1)
        .max_lifetime(Some(Duration::from_secs(60)))
        .idle_timeout(None)
        .build();
    settle(&pool, |m| m.idle == 1).await;
    let held = pool.acquire().await.unwrap();
    assert_eq!(held.id, 0);
    // Opened for the idle minimum while connection 0 is out.
    settle(&pool, |m| m.idle == 1).await;
    tokio::time::sleep(Duration::from_secs(61)).await;
    // The maintenance pass closed idle connection 1 and opened 2; connection 0 is closed when it
    // comes back.
    let metrics = settle(&pool, |m| m.closed == 1 && m.idle == 1).await;
    assert_eq!(metrics.opened, 3);
    drop(held);
    let metrics = settle(&pool, |m| m.closed == 2).await;
    assert_eq!((metrics.in_use, metrics.idle), (0, 1));
    assert_eq!(pool.acquire().await.unwrap().id, 2);
}

#[tokio::test(start_paused = true)]
async fn idle_connections_are_evicted_after_the_idle_timeout_down_to_min_idle() {
    let pool = Pool::builder(TestManager::default())
        .max_size(4)
        .min_idle(1)
        .idle_timeout(Some(Duration::from_secs(30)))
        .build();
    let held: Vec<_> = [
        pool.acquire().await.unwrap(),
        pool.acquire().await.unwrap(),
        pool.acquire().await.unwrap(),
    ]
    .into();
    drop(held);
    let metrics = settle(&pool, |m| m.idle >= 3 && m.opening == 0).await;
    let open = metrics.idle;
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(pool.metrics().idle, open, "evicted before the idle timeout");
    tokio::time::sleep(Duration::from_secs(11)).await;
    let metrics = settle(&pool, |m| m.idle == 1).await;
    assert_eq!(metrics.closed, open as u64 - 1);
}

#[tokio::test(start_paused = true)]
async fn idle_eviction_counts_only_idle_connections_against_min_idle() {
    // Regression: eviction ran while the *total* (in use included) exceeded the minimum, so with
    // connections in use it closed idle ones below the minimum and reopened them the same pass.
    let pool = Pool::builder(TestManager::default())
        .max_size(4)
        .min_idle(1)
        .idle_timeout(Some(Duration::from_secs(30)))
        .max_lifetime(None)
        .build();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(pool.acquire().await.unwrap());
    }
    // Two go back idle, one stays in use.
    held.truncate(1);
    let metrics = settle(&pool, |m| m.idle == 2 && m.in_use == 1).await;
    assert_eq!(metrics.opened, 3);
    tokio::time::sleep(Duration::from_secs(31)).await;
    let metrics = settle(&pool, |m| m.closed == 1).await;
    assert_eq!((metrics.idle, metrics.opened), (1, 3));
    // Several more maintenance passes change nothing.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let metrics = pool.metrics();
    assert_eq!((metrics.idle, metrics.opened, metrics.closed), (1, 3, 1));
}

#[tokio::test(start_paused = true)]
async fn an_acquire_timeout_too_long_to_represent_waits_without_one() {
    // Regression: the deadline was `start + timeout`, which panics on overflow.
    let pool = Pool::builder(TestManager::default()).max_size(1).build();
    let held = pool.acquire_timeout(Duration::MAX).await.unwrap();
    let waiter = tokio::spawn({
        let pool = pool.clone();
        async move {
            pool.acquire_timeout(Duration::MAX)
                .await
                .map(|conn| conn.id)
        }
    });
    settle(&pool, |m| m.waiters == 1).await;
    drop(held);
    assert_eq!(waiter.await.unwrap().unwrap(), 0);
}

#[test]
fn a_connection_dropped_outside_the_runtime_is_recycled_in_it() {
    // Regression: the inline poll of a return's recycle and check ran in whatever thread dropped
    // the connection; a manager using tokio's timers there panicked outside a runtime.
    let runtime = runtime(1);
    let pool = runtime.block_on(async {
        let manager = TestManager::default();
        manager.timer_recycle.store(true, SeqCst);
        Pool::builder(manager).max_size(1).build()
    });
    let conn = runtime.block_on(pool.acquire()).unwrap();
    std::thread::spawn(move || drop(conn)).join().unwrap();
    runtime.block_on(async {
        let metrics = settle(&pool, |m| m.idle == 1).await;
        assert_eq!((metrics.in_use, metrics.broken), (0, 0));
        assert_eq!(pool.manager().recycled.load(SeqCst), 1);
        assert_eq!(pool.acquire().await.unwrap().id, 0);
        pool.close().await;
    });
}

#[tokio::test(start_paused = true)]
async fn close_fails_pending_and_later_acquires() {
    let pool = Pool::builder(TestManager::default()).max_size(1).build();
    let held = pool.acquire().await.unwrap();
    let waiter = tokio::spawn({
        let pool = pool.clone();
        async move { pool.acquire().await.map(|conn| conn.id) }
    });
    settle(&pool, |m| m.waiters == 1).await;
    pool.close().await;
    assert!(matches!(waiter.await.unwrap(), Err(PoolError::Closed)));
    assert!(matches!(pool.acquire().await, Err(PoolError::Closed)));
    assert!(pool.is_closed());
    // The connection still out is closed when it comes back.
    drop(held);
    assert_eq!(pool.metrics().closed, 1);
    assert_eq!(pool.manager().ledger.dropped.load(SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn close_closes_idle_connections() {
    let pool = Pool::builder(TestManager::default())
        .max_size(3)
        .min_idle(3)
        .build();
    settle(&pool, |m| m.idle == 3).await;
    pool.close().await;
    let metrics = pool.metrics();
    assert_eq!((metrics.idle, metrics.closed), (0, 3));
    assert_eq!(pool.manager().ledger.dropped.load(SeqCst), 3);
    // Closing again is harmless.
    pool.close().await;
}

#[tokio::test(start_paused = true)]
async fn acquire_times_out_when_every_connection_is_held() {
    let pool = Pool::builder(TestManager::default())
        .max_size(1)
        .acquire_timeout(Duration::from_secs(2))
        .build();
    let held = pool.acquire().await.unwrap();
    let result = pool.acquire().await;
    assert!(matches!(result, Err(PoolError::Timeout(d)) if d == Duration::from_secs(2)));
    let metrics = pool.metrics();
    assert_eq!((metrics.timeouts, metrics.waiters), (1, 0));
    // The timed-out waiter left nothing behind: the connection goes idle when returned.
    drop(held);
    settle(&pool, |m| m.idle == 1).await;
}

#[tokio::test(start_paused = true)]
async fn a_dropped_acquire_withdraws_its_waiter() {
    let pool = Pool::builder(TestManager::default()).max_size(1).build();
    let held = pool.acquire().await.unwrap();
    tokio::select! {
        _ = pool.acquire() => panic!("served while the only connection is held"),
        () = tokio::time::sleep(Duration::from_millis(10)) => {}
    }
    assert_eq!(pool.metrics().waiters, 0);
    drop(held);
    settle(&pool, |m| m.idle == 1).await;
    assert_eq!(pool.acquire().await.unwrap().id, 0);
}

#[tokio::test(start_paused = true)]
async fn a_connect_failure_reaches_the_waiter_with_the_managers_error() {
    let manager = TestManager::default();
    manager.refuse.store(true, SeqCst);
    let pool = Pool::builder(manager).max_size(1).build();
    let error = pool.acquire().await.unwrap_err();
    let cause: &io::Error = error.connect_error().expect("a connect error");
    assert_eq!(cause.kind(), io::ErrorKind::ConnectionRefused);
    assert_eq!(error.is_transient(), None);
    assert_eq!(pool.metrics().connect_failures, 1);
    // Once the database is back, acquiring works again.
    pool.manager().refuse.store(false, SeqCst);
    assert_eq!(pool.acquire().await.unwrap().id, 0);
}

#[tokio::test(start_paused = true)]
async fn min_idle_connections_are_opened_when_the_pool_starts() {
    let pool = Pool::builder(TestManager::default())
        .max_size(5)
        .min_idle(2)
        .build();
    let metrics = settle(&pool, |m| m.idle == 2).await;
    assert_eq!((metrics.opened, metrics.in_use), (2, 0));
}

#[test]
#[should_panic(expected = "min_idle (3) cannot exceed max_size (2)")]
fn a_min_idle_above_max_size_is_refused() {
    runtime(1).block_on(async {
        let _ = Pool::builder(TestManager::default())
            .max_size(2)
            .min_idle(3)
            .build();
    });
}
