//! A manager whose connections report how they are used, and helpers for tests on paused time.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir_connection_pool::{Manager, Pool, PoolMetrics};

/// What the test manager's connections share with the test.
#[derive(Default)]
pub struct Ledger {
    /// One flag per connection id, set while some holder has it.
    pub in_use: Mutex<HashMap<u64, Arc<AtomicBool>>>,
    /// Connections dropped (closed).
    pub dropped: AtomicU64,
    /// Holders right now, and the most there ever were.
    pub holders: AtomicUsize,
    pub most_holders: AtomicUsize,
}

pub struct TestConn {
    pub id: u64,
    in_use: Arc<AtomicBool>,
    ledger: Arc<Ledger>,
}

impl TestConn {
    /// Call right after acquiring: fails if another holder has this connection.
    pub fn take(&self) {
        assert!(
            !self.in_use.swap(true, SeqCst),
            "connection {} handed to two holders at once",
            self.id
        );
        let now = self.ledger.holders.fetch_add(1, SeqCst) + 1;
        self.ledger.most_holders.fetch_max(now, SeqCst);
    }

    /// Call right before dropping the pooled connection.
    pub fn give_back(&self) {
        self.ledger.holders.fetch_sub(1, SeqCst);
        assert!(
            self.in_use.swap(false, SeqCst),
            "connection {} was not held",
            self.id
        );
    }
}

impl Drop for TestConn {
    fn drop(&mut self) {
        self.ledger.dropped.fetch_add(1, SeqCst);
    }
}

#[derive(Default)]
pub struct TestManager {
    pub ledger: Arc<Ledger>,
    next_id: AtomicU64,
    /// Connect attempts fail with `ConnectionRefused` while set.
    pub refuse: AtomicBool,
    /// Connections whose check fails.
    pub failing_checks: Mutex<HashSet<u64>>,
    /// Recycle waits for one scheduler turn while set (so returns finish in a pool task).
    pub slow_recycle: AtomicBool,
    /// Recycle sleeps on a tokio timer while set, which needs a runtime context.
    pub timer_recycle: AtomicBool,
    /// Recycle never completes while set.
    pub hang_recycle: AtomicBool,
    /// Connect never completes while set.
    pub hang_connect: AtomicBool,
    pub recycled: AtomicU64,
}

impl Manager for TestManager {
    type Connection = TestConn;
    type Error = io::Error;

    async fn connect(&self) -> Result<TestConn, io::Error> {
        if self.hang_connect.load(SeqCst) {
            std::future::pending::<()>().await;
        }
        if self.refuse.load(SeqCst) {
            return Err(io::Error::new(io::ErrorKind::ConnectionRefused, "refused"));
        }
        let id = self.next_id.fetch_add(1, SeqCst);
        let in_use = Arc::new(AtomicBool::new(false));
        self.ledger
            .in_use
            .lock()
            .unwrap()
            .insert(id, Arc::clone(&in_use));
        Ok(TestConn {
            id,
            in_use,
            ledger: Arc::clone(&self.ledger),
        })
    }

    async fn check(&self, conn: &mut TestConn) -> Result<(), io::Error> {
        if self.failing_checks.lock().unwrap().contains(&conn.id) {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "gone"));
        }
        Ok(())
    }

    async fn recycle(&self, _conn: &mut TestConn) -> Result<(), io::Error> {
        if self.slow_recycle.load(SeqCst) {
            tokio::task::yield_now().await;
        }
        if self.timer_recycle.load(SeqCst) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if self.hang_recycle.load(SeqCst) {
            std::future::pending::<()>().await;
        }
        self.recycled.fetch_add(1, SeqCst);
        Ok(())
    }
}

/// Lets the pool's tasks run (on paused time: advancing it in 1 ms steps) until `ready` holds for
/// its metrics; fails after 10,000 steps.
pub async fn settle<M: Manager>(
    pool: &Pool<M>,
    ready: impl Fn(&PoolMetrics) -> bool,
) -> PoolMetrics {
    for _ in 0..10_000 {
        let metrics = pool.metrics();
        if ready(&metrics) {
            return metrics;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!(
        "the pool never reached the expected state: {:?}",
        pool.metrics()
    );
}

/// A small seeded generator, so stress tests are repeatable in what they ask for.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}
