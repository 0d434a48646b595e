//! `weir bench serve`: what `weir serve` costs.
//!
//! - API latency: with `--jobs` jobs hosted (small rate-limited Nexmark pipelines, all
//!   running), p50/p99 of `GET /api/v1/jobs/{id}` and `GET /metrics` over loopback HTTP, one
//!   client at a time and four at once.
//! - Dashboard cost: a Nexmark q1 run flat out inside the server, alone, with ten simulated
//!   dashboards on its job page (each polling what an open job page polls, every second), and
//!   with ten on an operator page with the live output on (the job and the operator's tail,
//!   every second, as that page asks: the tail records rows all the while), alternated `--rounds`
//!   times; the ratio of the medians of events/s is the cost.
//!
//! Everything stays on loopback and every loop is bounded in count.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;
use weir_http_ui::{HostConfig, JobLimits, ServeConfig, Server};

#[derive(clap::Args, Debug)]
pub struct BenchServeArgs {
    /// Jobs hosted while API latency is measured.
    #[arg(long, default_value_t = 100)]
    jobs: usize,
    /// Requests per measured route and client count.
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    /// Events of the Nexmark q1 run for the dashboard-cost arms.
    #[arg(long, default_value_t = 200_000_000)]
    events: u64,
    /// Runs of each dashboard-cost arm (alternated).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

pub(crate) fn run(args: &BenchServeArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let server = runtime.block_on(Server::bind(ServeConfig {
        listen: ([127, 0, 0, 1], 0).into(),
        host: HostConfig {
            max_running: args.jobs.max(1) + 8,
            limits: JobLimits {
                max_subtasks: (args.jobs.max(1) + 8) * 8,
                ..JobLimits::default()
            },
            ..HostConfig::default()
        },
        ..ServeConfig::default()
    }))?;
    let base = format!("http://{}", server.addr);
    let background = {
        let _entered = runtime.enter();
        server.spawn()
    };
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build(),
    );
    let result = (|| {
        dashboard_cost(&agent, &base, args)?;
        api_latency(&agent, &base, args)
    })();
    runtime.block_on(background.stop())?;
    result
}

fn submit(agent: &ureq::Agent, base: &str, yaml: String) -> anyhow::Result<String> {
    let mut r = agent.post(&format!("{base}/api/v1/jobs")).send(yaml)?;
    let status = r.status().as_u16();
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string()?)?;
    if status != 201 {
        bail!("submit: HTTP {status}: {v}");
    }
    v["id"]
        .as_str()
        .map(str::to_owned)
        .context("no id in the answer")
}

fn get(agent: &ureq::Agent, url: &str) -> anyhow::Result<String> {
    let mut r = agent.get(url).call()?;
    let status = r.status().as_u16();
    let body = r.body_mut().read_to_string()?;
    if status != 200 {
        bail!("{url}: HTTP {status}");
    }
    Ok(body)
}

fn q1(name: &str, source: &str) -> String {
    format!(
        "name: {name}\n\
         sources:\n  nexmark: {{kind: nexmark, {source}}}\n\
         transforms:\n  q1:\n    kind: map\n    from: nexmark.bid\n    columns: {{auction: auction, bidder: bidder, price: price * 0.908, dateTime: dateTime}}\n\
         sinks:\n  out: {{kind: blackhole, from: q1}}\n"
    )
}

/// p50, p99 and max of `samples` (µs).
fn quantiles(mut samples: Vec<f64>) -> (f64, f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let i = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[i]
    };
    (at(0.5), at(0.99), samples.last().copied().unwrap_or(0.0))
}

/// The URL of the `n`th request to a route.
type UrlOf<'a> = Box<dyn Fn(usize) -> String + Sync + 'a>;

fn api_latency(agent: &ureq::Agent, base: &str, args: &BenchServeArgs) -> anyhow::Result<()> {
    let mut ids = Vec::with_capacity(args.jobs);
    for i in 0..args.jobs {
        ids.push(submit(
            agent,
            base,
            q1(&format!("bench-{i}"), "rate: 1000"),
        )?);
    }
    // Let the sampler fill the jobs' histories (the detail view renders them).
    std::thread::sleep(Duration::from_secs(3));
    println!(
        "API latency over loopback HTTP, {} jobs running ({} requests per row)",
        args.jobs, args.requests
    );
    println!(
        "  {:28}  {:>7}  {:>10}  {:>10}  {:>10}  {:>9}",
        "route", "clients", "p50", "p99", "max", "req/s"
    );
    let routes: [(&str, UrlOf<'_>); 2] = [
        (
            "GET /api/v1/jobs/{id}",
            Box::new(|n| format!("{base}/api/v1/jobs/{}", ids[n % ids.len()])),
        ),
        ("GET /metrics", Box::new(|_| format!("{base}/metrics"))),
    ];
    for (route, url) in &routes {
        for clients in [1usize, 4] {
            let per_client = args.requests / clients;
            let started = Instant::now();
            let samples: Vec<f64> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..clients)
                    .map(|c| {
                        let url = &url;
                        scope.spawn(move || -> anyhow::Result<Vec<f64>> {
                            let mut out = Vec::with_capacity(per_client);
                            for n in 0..per_client {
                                let t = Instant::now();
                                get(agent, &url(c * per_client + n))?;
                                out.push(t.elapsed().as_secs_f64() * 1e6);
                            }
                            Ok(out)
                        })
                    })
                    .collect();
                let mut all = Vec::new();
                for h in handles {
                    match h.join() {
                        Ok(Ok(v)) => all.extend(v),
                        Ok(Err(e)) => return Err(e),
                        Err(_) => bail!("a client thread panicked"),
                    }
                }
                Ok(all)
            })?;
            let elapsed = started.elapsed().as_secs_f64();
            let n = samples.len();
            let (p50, p99, max) = quantiles(samples);
            println!(
                "  {route:28}  {clients:>7}  {:>10}  {:>10}  {:>10}  {:>9.0}",
                micros(p50),
                micros(p99),
                micros(max),
                n as f64 / elapsed
            );
        }
    }
    for id in &ids {
        let _ = agent
            .post(&format!("{base}/api/v1/jobs/{id}/cancel"))
            .send_empty();
    }
    Ok(())
}

fn micros(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

/// What a simulated browser has open.
#[derive(Clone, Copy, PartialEq)]
enum Page {
    /// The job's overview: the job, and the list.
    Job,
    /// The q1 operator's page with its live output: the job and the tail (the page asks for
    /// no more; the log is another tab).
    Tail,
}

/// Runs q1 over `events` flat out and returns its events/s, with `dashboards` simulated open
/// `page`s polling every second meanwhile.
fn q1_run(
    agent: &ureq::Agent,
    base: &str,
    events: u64,
    dashboards: usize,
    page: Page,
    round: usize,
) -> anyhow::Result<(f64, u64)> {
    let id = submit(
        agent,
        base,
        q1(
            &format!(
                "dash-{dashboards}-{}-{round}",
                if page == Page::Tail { "tail" } else { "job" }
            ),
            &format!("events: {events}"),
        ),
    )?;
    let done = Arc::new(AtomicBool::new(false));
    let polls = std::thread::scope(|scope| -> anyhow::Result<u64> {
        let pollers: Vec<_> = (0..dashboards)
            .map(|d| {
                let (done, id) = (done.clone(), id.clone());
                scope.spawn(move || {
                    let mut polls = 0u64;
                    // Spread the pages over the second, as real browsers would be.
                    std::thread::sleep(Duration::from_millis(100 * d as u64 % 1000));
                    // Bounded: an hour of polling at most.
                    for _ in 0..3600 {
                        if done.load(Ordering::Relaxed) {
                            break;
                        }
                        let t = Instant::now();
                        // What an open page asks each second.
                        let urls = match page {
                            Page::Job => vec![
                                format!("{base}/api/v1/jobs/{id}"),
                                format!("{base}/api/v1/jobs"),
                            ],
                            Page::Tail => vec![
                                format!("{base}/api/v1/jobs/{id}"),
                                format!("{base}/api/v1/jobs/{id}/nodes/q1/tail"),
                            ],
                        };
                        for url in urls {
                            if get(agent, &url).is_ok() {
                                polls += 1;
                            }
                        }
                        std::thread::sleep(Duration::from_secs(1).saturating_sub(t.elapsed()));
                    }
                    polls
                })
            })
            .collect();
        let result = wait_finished(agent, base, &id);
        done.store(true, Ordering::Relaxed);
        let polls: u64 = pollers.into_iter().map(|p| p.join().unwrap_or(0)).sum();
        result.map(|_| polls)
    })?;
    let v: Value = serde_json::from_str(&get(agent, &format!("{base}/api/v1/jobs/{id}"))?)?;
    let events = v["events"].as_u64().unwrap_or(0) as f64;
    let ms = v["duration-ms"].as_f64().unwrap_or(1.0).max(1.0);
    Ok((events / (ms / 1000.0), polls))
}

fn wait_finished(agent: &ureq::Agent, base: &str, id: &str) -> anyhow::Result<()> {
    // Bounded: ten minutes.
    for _ in 0..12_000 {
        let v: Value = serde_json::from_str(&get(agent, &format!("{base}/api/v1/jobs/{id}"))?)?;
        match v["state"].as_str() {
            Some("finished") => return Ok(()),
            Some("running") => std::thread::sleep(Duration::from_millis(50)),
            other => bail!("job {id} ended {other:?}: {}", v["error"]),
        }
    }
    bail!("job {id} did not finish in ten minutes")
}

fn dashboard_cost(agent: &ureq::Agent, base: &str, args: &BenchServeArgs) -> anyhow::Result<()> {
    println!(
        "Dashboard cost: Nexmark q1 over {} events inside `weir serve`, {} rounds per arm (alternated)",
        args.events, args.rounds
    );
    let mut alone = Vec::new();
    let mut watched = Vec::new();
    let mut tailed = Vec::new();
    let (mut polls, mut tail_polls) = (0, 0);
    for round in 0..args.rounds {
        alone.push(q1_run(agent, base, args.events, 0, Page::Job, round)?.0);
        let (rate, p) = q1_run(agent, base, args.events, 10, Page::Job, round)?;
        watched.push(rate);
        polls += p;
        let (rate, p) = q1_run(agent, base, args.events, 10, Page::Tail, round)?;
        tailed.push(rate);
        tail_polls += p;
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (a, w, t) = (
        median(alone.clone()),
        median(watched.clone()),
        median(tailed.clone()),
    );
    println!("  {:44}  {:>14}  runs (events/s)", "arm", "median events/s");
    for (arm, median, runs) in [
        ("no dashboard", a, &alone),
        ("10 job pages polling every 1 s", w, &watched),
        ("10 operator pages, live output on, every 1 s", t, &tailed),
    ] {
        println!(
            "  {arm:44}  {:>14}  {}",
            crate::measure::group(median as u64),
            list(runs)
        );
    }
    println!(
        "  cost of 10 job pages: {:+.1}% events/s ({polls} API requests served)",
        (w / a - 1.0) * 100.0,
    );
    println!(
        "  cost of 10 pages with the live output: {:+.1}% events/s ({tail_polls} API requests served)",
        (t / a - 1.0) * 100.0,
    );
    Ok(())
}

fn list(v: &[f64]) -> String {
    v.iter()
        .map(|x| crate::measure::group(*x as u64))
        .collect::<Vec<_>>()
        .join(", ")
}
