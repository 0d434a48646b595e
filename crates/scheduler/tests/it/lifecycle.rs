use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weir_scheduler::{BoxFuture, Scheduler, SchedulerError, Tick};

use crate::{DropFlag, counting, pipeline, runtime, scheduler, threads_named, wait_until};

#[test]
fn shutdown_joins_the_timer_thread_aborts_futures_and_closes_leases() {
    let rt = runtime("shutdown-rt");
    let s = scheduler(&rt, "shutdown-sched");
    let dropped = Arc::new(AtomicBool::new(false));
    let lease = {
        let dropped = Arc::clone(&dropped);
        s.register_at(
            "a",
            Instant::now(),
            Duration::from_secs(3600),
            move |_t: Tick| {
                let flag = DropFlag(Arc::clone(&dropped));
                Some(Box::pin(async move {
                    let _flag = flag;
                    std::future::pending::<()>().await;
                }) as BoxFuture)
            },
        )
        .expect("register")
    };
    wait_until("the first tick is in flight", || lease.is_running());
    let pending = lease.fire_now();
    assert_eq!(threads_named("shutdown-sched"), 1);

    s.shutdown();
    wait_until("the timer thread is gone", || {
        threads_named("shutdown-sched") == 0
    });
    wait_until("the in-flight future is aborted", || {
        dropped.load(Ordering::SeqCst)
    });
    assert!(matches!(
        rt.block_on(pending),
        Err(SchedulerError::ShutDown)
    ));
    assert!(matches!(
        rt.block_on(lease.fire_now()),
        Err(SchedulerError::ShutDown)
    ));
    drop(lease); // after shutdown: a no-op
}

#[test]
fn register_rejects_unusable_intervals_with_the_pipeline_name() {
    let rt = runtime("interval-rt");
    let s = scheduler(&rt, "interval-sched");
    let (_, trigger) = counting();
    let err = s
        .register("orders", Duration::ZERO, trigger)
        .expect_err("zero interval");
    assert!(matches!(err, SchedulerError::InvalidInterval { .. }));
    assert!(err.to_string().contains("`orders`"), "{err}");
    let (_, trigger) = counting();
    assert!(
        s.register("orders", Duration::from_secs(u64::MAX), trigger)
            .is_err()
    );
}

#[test]
fn a_panicking_trigger_is_counted_and_its_schedule_goes_on() {
    let rt = runtime("panic-rt");
    let s = scheduler(&rt, "panic-sched");
    let calls = Arc::new(AtomicU64::new(0));
    let _flaky = {
        let calls = Arc::clone(&calls);
        s.register("flaky", Duration::from_millis(1), move |_t: Tick| {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("the first tick of a flaky trigger panics (expected by the test)");
            }
            None
        })
        .expect("register")
    };
    let (other, trigger) = counting();
    let _other = s
        .register("other", Duration::from_millis(1), trigger)
        .expect("register");
    wait_until("both keep firing after the panic", || {
        calls.load(Ordering::SeqCst) >= 5 && other.load(Ordering::SeqCst) >= 5
    });
    let m = pipeline(&s, "flaky");
    assert_eq!(m.panicked, 1);
    assert!(m.fired >= 5);
    assert_eq!(s.metrics().panicked, 1);
}

#[test]
fn triggers_can_use_tokio_inline_on_the_timer_thread() {
    let rt = runtime("ctx-rt");
    let s: Scheduler = scheduler(&rt, "ctx-sched");
    let lease = s
        .register_at(
            "ctx",
            Instant::now(),
            Duration::from_secs(3600),
            |_t: Tick| {
                // Building a tokio timer needs the runtime's context: the timer thread enters it.
                let sleep = tokio::time::sleep(Duration::from_millis(1));
                Some(Box::pin(sleep) as BoxFuture)
            },
        )
        .expect("register");
    wait_until("the tick fired", || pipeline(&s, "ctx").fired == 1);
    assert_eq!(pipeline(&s, "ctx").panicked, 0);
    drop(lease);
}

#[test]
fn metrics_serialize_as_kebab_case_json_for_the_http_api() {
    let rt = runtime("json-rt");
    let s = scheduler(&rt, "json-sched");
    let (calls, trigger) = counting();
    let lease = s
        .register_at("orders", Instant::now(), Duration::from_millis(10), trigger)
        .expect("register");
    wait_until("one tick", || calls.load(Ordering::SeqCst) >= 1);
    let json = serde_json::to_value(s.metrics()).expect("json");
    assert_eq!(json["threads"], 1);
    let p = &json["pipelines"][0];
    assert_eq!(p["name"], "orders");
    assert_eq!(p["interval-us"], 10_000);
    for key in [
        "fired",
        "coalesced",
        "p50-us",
        "p99-us",
        "max-us",
        "buckets",
    ] {
        assert!(!p[key].is_null(), "missing {key}: {p}");
    }
    assert!(!json["precision"]["spin-us"].is_null());
    drop(lease);
}
