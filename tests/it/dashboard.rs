//! The dashboard in a real headless browser (Chromium driven through chromedriver): submit a
//! job through the form (problems shown in place first), see it running with rising counts,
//! take a savepoint and see it complete, see the checkpoints tab, cancel the job. Screenshots
//! of each page are saved in `out/dashboard-screenshots/`.
//!
//! It needs Debian's `chromium` and `chromium-driver` packages, which `make test` installs when
//! missing. Alone: `cargo test --release --workspace --test it -- dashboard`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use weir_http_ui::{HostConfig, ServeConfig, Server};

/// chromedriver as a child process, killed when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (apt-get install chromium chromium-driver)");
        Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn connect(driver: &Driver) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1100"]}),
    );
    // chromedriver takes a moment to listen.
    for _ in 0..100 {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        if let Ok(c) = ClientBuilder::new(connector)
            .capabilities(caps.clone())
            .connect(&driver.url)
            .await
        {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("cannot connect to chromedriver at {}", driver.url);
}

/// Polls a script's result until `done` holds (bounded: 30 s).
async fn wait_js(c: &Client, script: &str, done: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..300 {
        if let Ok(v) = c.execute(script, vec![]).await
            && done(&v)
        {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("never true: {script}");
}

async fn screenshot(c: &Client, dir: &Path, name: &str) {
    let png = c.screenshot().await.unwrap();
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

/// Types `text` into the submit page's editor as a user would (the page listens to `input`).
async fn set_editor(c: &Client, text: &str) {
    c.execute(
        "const t = document.getElementById('yaml'); t.value = arguments[0]; \
         t.dispatchEvent(new Event('input'));",
        vec![json!(text)],
    )
    .await
    .unwrap();
}

/// The number in the first stat of a job page (its events).
const EVENTS: &str = "const v = document.querySelector('.stat .v'); \
                      return v ? Number(v.textContent.replace(/,/g, '')) : -1;";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_submits_watches_savepoints_and_cancels_a_job() {
    let shots = PathBuf::from("out/dashboard-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let storage = format!("out/serve-tests/dashboard-{}", std::process::id());
    let server = Server::bind(ServeConfig {
        listen: ([127, 0, 0, 1], 0).into(),
        host: HostConfig {
            sample_every: Duration::from_millis(250),
            ..HostConfig::default()
        },
        ..ServeConfig::default()
    })
    .await
    .unwrap();
    let base = format!("http://{}", server.addr);
    let server = server.spawn();
    let driver = Driver::start();
    let c = connect(&driver).await;

    // A job with mistakes: the problems are listed and their lines marked in the editor.
    c.goto(&format!("{base}/#/submit")).await.unwrap();
    c.wait().for_element(Locator::Id("yaml")).await.unwrap();
    set_editor(
        &c,
        "name: e2e\nsources:\n  gen: {kind: nexmark, events: lots}\nsinks:\n  out: {kind: blackhole, from: gen.bid}\n",
    )
    .await;
    let marked = wait_js(
        &c,
        "return [...document.querySelectorAll('#gutter div.bad')].map(d => d.textContent);",
        |v| v.as_array().is_some_and(|a| !a.is_empty()),
    )
    .await;
    assert_eq!(marked, json!(["3"]));
    let problem = c
        .find(Locator::Css("#problems li"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(problem.contains("sources.gen.events"), "{problem}");
    screenshot(&c, &shots, "submit-with-problems").await;

    // A valid job, submitted through the form: the page moves to the job, which runs.
    let job = format!(
        "name: e2e-dashboard\n\
         two-phase-aggregation: false\n\
         sources:\n  nexmark: {{kind: nexmark, rate: 20000}}\n\
         transforms:\n  by-auction: {{kind: key-by, from: nexmark.bid, keys: [auction]}}\n  \
         counts: {{kind: aggregate, from: by-auction, aggregates: {{bids: count(*)}}}}\n\
         sinks:\n  out: {{kind: blackhole, from: counts}}\n\
         checkpoint: {{interval: 300ms, storage: {storage}}}\n"
    );
    set_editor(&c, &job).await;
    wait_js(
        &c,
        "return !!document.querySelector('#verdict .message.ok');",
        |v| v == &json!(true),
    )
    .await;
    c.find(Locator::Id("submit"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let hash = wait_js(&c, "return location.hash;", |v| {
        v.as_str().is_some_and(|h| h.starts_with("#/jobs/"))
    })
    .await;
    let id = hash
        .as_str()
        .unwrap()
        .trim_start_matches("#/jobs/")
        .to_owned();
    wait_js(
        &c,
        "return document.querySelector('h1 .badge')?.textContent;",
        |v| v == "running",
    )
    .await;
    // Counts rise while the page is open, without reloading it.
    let first = wait_js(&c, EVENTS, |v| v.as_f64().is_some_and(|n| n > 0.0)).await;
    let first = first.as_f64().unwrap();
    wait_js(&c, EVENTS, |v| v.as_f64().is_some_and(|n| n > first)).await;
    let nodes = c.find_all(Locator::Css(".dag g.node")).await.unwrap().len();
    assert_eq!(nodes, 3);
    screenshot(&c, &shots, "job").await;

    // A savepoint from the button completes.
    wait_js(
        &c,
        "return !document.getElementById('act-savepoint').disabled;",
        |v| v == &json!(true),
    )
    .await;
    c.find(Locator::Id("act-savepoint"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let said = wait_js(
        &c,
        "return document.getElementById('act-results').textContent;",
        |v| {
            v.as_str()
                .is_some_and(|t| t.contains("complete") || t.contains("failed"))
        },
    )
    .await;
    assert!(said.as_str().unwrap().contains("complete"), "{said}");
    screenshot(&c, &shots, "job-after-savepoint").await;

    // The checkpoints tab shows the history with the savepoint in it.
    c.goto(&format!("{base}/#/jobs/{id}/checkpoints"))
        .await
        .unwrap();
    wait_js(
        &c,
        "return [...document.querySelectorAll('td')].some(td => td.textContent === 'savepoint');",
        |v| v == &json!(true),
    )
    .await;
    screenshot(&c, &shots, "checkpoints").await;

    // Cancel from the job page.
    c.goto(&format!("{base}/#/jobs/{id}")).await.unwrap();
    wait_js(
        &c,
        "const b = document.getElementById('act-cancel'); return !!b && !b.disabled;",
        |v| v == &json!(true),
    )
    .await;
    c.find(Locator::Id("act-cancel"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // Cancelling asks first.
    c.find(Locator::Id("confirm-yes"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_js(
        &c,
        "return document.querySelector('h1 .badge')?.textContent;",
        |v| v == "cancelled",
    )
    .await;
    let state = server.host.job(&id).unwrap().state();
    assert_eq!(state, weir_http_ui::JobState::Cancelled);

    c.goto(&format!("{base}/#/")).await.unwrap();
    wait_js(
        &c,
        "return document.querySelectorAll('tr.link').length;",
        |v| v == &json!(1),
    )
    .await;
    screenshot(&c, &shots, "jobs").await;
    c.goto(&format!("{base}/#/scheduler")).await.unwrap();
    c.wait().for_element(Locator::Css(".stat")).await.unwrap();
    screenshot(&c, &shots, "scheduler").await;

    c.close().await.unwrap();
    drop(driver);
    server.stop().await.unwrap();
    let _ = std::fs::remove_dir_all(&storage);
}

/// Selects the text of the first element matching `css` (as a user dragging over it would)
/// and returns it.
const SELECT: &str = "const el = document.querySelector(arguments[0]); if (!el) return ''; \
                      const r = document.createRange(); r.selectNodeContents(el); \
                      const s = window.getSelection(); s.removeAllRanges(); s.addRange(r); \
                      return s.toString();";

/// Issue 21's dashboard: a skewed operator flagged on the graph, whose box opens its page;
/// per-subtask rows and a live tail; the effective job with its override; a selection that
/// survives five refreshes; a checkpoint's detail; cancel asking first; a restart from a
/// listed snapshot that exists; a failing job's error in its Logs tab; submit with options.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_subtasks_output_logs_and_the_effective_job_and_keeps_selections() {
    crate::serve_views::capture_job_logs();
    let shots = PathBuf::from("out/dashboard-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let storage = format!("out/serve-tests/dashboard-views-{}", std::process::id());
    let server = Server::bind(ServeConfig {
        listen: ([127, 0, 0, 1], 0).into(),
        host: HostConfig {
            sample_every: Duration::from_millis(250),
            ..HostConfig::default()
        },
        ..ServeConfig::default()
    })
    .await
    .unwrap();
    let base = format!("http://{}", server.addr);
    let server = server.spawn();
    let driver = Driver::start();
    let c = connect(&driver).await;

    // A keyed count at parallelism 2, submitted with an override: the hot auction's subtask
    // does most of the work.
    let job = server
        .host
        .submit_with(
            "job.yaml",
            &format!(
                "name: views\n\
                 two-phase-aggregation: false\n\
                 sources:\n  nexmark: {{kind: nexmark, rate: 20000, parallelism: 1}}\n\
                 transforms:\n  by-auction: {{kind: key-by, from: nexmark.bid, keys: [auction]}}\n  \
                 counts: {{kind: aggregate, from: by-auction, aggregates: {{bids: count(*)}}}}\n\
                 sinks:\n  out: {{kind: blackhole, from: counts}}\n\
                 checkpoint: {{interval: 1s, storage: {storage}, retained: 10}}\n"
            ),
            weir_http_ui::host::SubmitOptions {
                overrides: vec!["sources.nexmark.rate=15000".into()],
                parallelism: Some(2),
                from: None,
            },
        )
        .await
        .unwrap();
    let id = job.id.to_string();
    c.goto(&format!("{base}/#/jobs/{id}")).await.unwrap();
    let skewed = wait_js(
        &c,
        "return [...document.querySelectorAll('.dag g.node.skewed')].map(g => g.dataset.name);",
        |v| v.as_array().is_some_and(|a| !a.is_empty()),
    )
    .await;
    assert_eq!(skewed, json!(["counts"]));
    screenshot(&c, &shots, "job-skewed").await;

    // The graph's box opens the operator: a row per subtask, and its output.
    c.find(Locator::Css(".dag g.node.skewed rect"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_js(&c, "return location.hash;", |v| {
        v.as_str().is_some_and(|h| h.ends_with("/operators/counts"))
    })
    .await;
    wait_js(
        &c,
        "return document.querySelectorAll('#subtasks tbody tr').length;",
        |v| v == &json!(2),
    )
    .await;
    let columns = wait_js(
        &c,
        "return document.querySelectorAll('#tail table.tail tbody tr').length ? \
         [...document.querySelectorAll('#tail table.tail th')].map(th => th.textContent) : [];",
        |v| v.as_array().is_some_and(|a| !a.is_empty()),
    )
    .await;
    assert!(
        columns.as_array().unwrap().contains(&json!("bids")),
        "{columns}"
    );
    screenshot(&c, &shots, "operator").await;

    // The job as it runs: the override in it.
    c.goto(&format!("{base}/#/jobs/{id}/spec")).await.unwrap();
    let spec = wait_js(
        &c,
        "return document.getElementById('spec-text')?.textContent || '';",
        |v| v.as_str().is_some_and(|t| !t.is_empty()),
    )
    .await;
    let spec = spec.as_str().unwrap();
    assert!(spec.contains("rate: 15000"), "{spec}");
    assert!(spec.contains("batch-size:"), "{spec}");
    screenshot(&c, &shots, "job-effective").await;

    // A checkpoint's location, selected, stays selected while new checkpoints arrive.
    c.goto(&format!("{base}/#/jobs/{id}/checkpoints"))
        .await
        .unwrap();
    wait_js(
        &c,
        "return document.querySelectorAll('#cp-history tr.cp-row').length;",
        |v| v.as_u64().is_some_and(|n| n >= 2),
    )
    .await;
    let first = c
        .execute(
            "return document.querySelector('#cp-history tr.cp-row').dataset.key;",
            vec![],
        )
        .await
        .unwrap();
    let selected = c
        .execute(
            SELECT,
            vec![json!("#cp-history tr.cp-row:last-child td.location")],
        )
        .await
        .unwrap();
    assert!(
        selected.as_str().is_some_and(|s| s.contains("chk-")),
        "{selected}"
    );
    // Five refreshes (one a second), with newer checkpoints arriving at the top meanwhile.
    tokio::time::sleep(Duration::from_millis(5500)).await;
    let newest = c
        .execute(
            "return document.querySelector('#cp-history tr.cp-row').dataset.key;",
            vec![],
        )
        .await
        .unwrap();
    assert_ne!(newest, first, "no checkpoint arrived in five seconds");
    let still = c
        .execute("return window.getSelection().toString();", vec![])
        .await
        .unwrap();
    assert_eq!(still, selected);
    screenshot(&c, &shots, "checkpoints-selection").await;
    c.execute("window.getSelection().removeAllRanges();", vec![])
        .await
        .unwrap();

    // A history row opens the checkpoint's detail: a row per subtask.
    c.find(Locator::Css("#cp-history tr.cp-row td"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_js(
        &c,
        "return document.querySelectorAll('#cp-history tr.cp-detail table.detail tbody tr').length;",
        |v| v.as_u64().is_some_and(|n| n >= 4),
    )
    .await;
    // A checkpoint retention keeps: its sizes from the metadata, keyed files and all.
    let detail = c
        .execute(
            "return document.querySelector('#cp-history tr.cp-detail').textContent;",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        detail.as_str().is_some_and(|t| t.contains(" files")),
        "{detail}"
    );
    c.execute(
        "document.querySelector('#cp-history tr.cp-detail').scrollIntoView({block: 'center'});",
        vec![],
    )
    .await
    .unwrap();
    screenshot(&c, &shots, "checkpoint-detail").await;

    // Cancel asks first; "keep it running" keeps it running.
    c.goto(&format!("{base}/#/jobs/{id}")).await.unwrap();
    wait_js(
        &c,
        "const b = document.getElementById('act-cancel'); return !!b && !b.disabled;",
        |v| v == &json!(true),
    )
    .await;
    c.find(Locator::Id("act-cancel"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_js(&c, "return document.getElementById('confirm').open;", |v| {
        v == &json!(true)
    })
    .await;
    screenshot(&c, &shots, "confirm-cancel").await;
    c.find(Locator::Id("confirm-no"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(job.state(), weir_http_ui::JobState::Running);
    c.find(Locator::Id("act-cancel"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.find(Locator::Id("confirm-yes"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_js(
        &c,
        "return document.querySelector('h1 .badge')?.textContent;",
        |v| v == "cancelled",
    )
    .await;
    // The action's result is still shown after the header redrew.
    let said = c
        .execute(
            "return document.getElementById('act-results').textContent;",
            vec![],
        )
        .await
        .unwrap();
    assert!(said.as_str().unwrap().contains("cancelling"), "{said}");

    // The restart selector lists the snapshots on disk, and one of them restarts the job.
    let listed = wait_js(
        &c,
        "return [...document.querySelectorAll('#restart-from option')].map(o => o.value).filter(v => v.startsWith('chk-'));",
        |v| v.as_array().is_some_and(|a| !a.is_empty()),
    )
    .await;
    let job_dir = std::fs::read_dir(&storage)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir() && p.file_name().unwrap() != "shared")
        .unwrap();
    for name in listed.as_array().unwrap() {
        let (_, n) = name.as_str().unwrap().split_once('-').unwrap();
        let folder = job_dir.join(format!("chk-{:010}", n.parse::<u64>().unwrap()));
        assert!(
            folder.join("_metadata").exists(),
            "{folder:?} is listed but gone"
        );
    }
    let chosen = listed[0].as_str().unwrap().to_owned();
    c.execute(
        "const s = document.getElementById('restart-from'); s.value = arguments[0];",
        vec![json!(chosen)],
    )
    .await
    .unwrap();
    c.find(Locator::Id("act-restart"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_js(
        &c,
        "return document.querySelector('h1 .badge')?.textContent;",
        |v| v == "running",
    )
    .await;
    let detail = job.detail(250);
    assert_eq!(detail.overview.run, 2);
    assert!(
        detail.restored_from.as_deref().is_some_and(|r| r == chosen),
        "{:?}",
        detail.restored_from
    );
    server.host.cancel(&job).unwrap();

    // A failing job's error in its Logs tab.
    std::fs::create_dir_all(&storage).unwrap();
    let input = format!("{storage}/bad.jsonl");
    std::fs::write(&input, "{\"user\": \"a\"}\nnot json\n").unwrap();
    let failing = server
        .host
        .submit(
            "job.yaml",
            &format!(
                "name: failing\nsources:\n  clicks: {{kind: jsonl, path: {input}, schema: {{user: string}}}}\n\
                 sinks:\n  out: {{kind: blackhole, from: clicks}}\n"
            ),
            &[],
        )
        .await
        .unwrap();
    c.goto(&format!("{base}/#/jobs/{}/logs", failing.id))
        .await
        .unwrap();
    let line = wait_js(
        &c,
        "return document.querySelector('#log-lines tr.log.error')?.textContent || '';",
        |v| v.as_str().is_some_and(|t| !t.is_empty()),
    )
    .await;
    assert!(line.as_str().unwrap().contains("line 2"), "{line}");
    screenshot(&c, &shots, "logs").await;

    // The submit page has its options.
    c.goto(&format!("{base}/#/submit")).await.unwrap();
    c.wait().for_element(Locator::Id("opt-set")).await.unwrap();
    c.execute(
        "document.getElementById('opt-parallelism').value = '0'; \
         document.getElementById('opt-parallelism').dispatchEvent(new Event('input'));",
        vec![],
    )
    .await
    .unwrap();
    let verdict = wait_js(
        &c,
        "return document.getElementById('verdict').textContent;",
        |v| v.as_str().is_some_and(|t| t.contains("parallelism")),
    )
    .await;
    assert!(
        verdict.as_str().unwrap().contains("at least 1"),
        "{verdict}"
    );
    screenshot(&c, &shots, "submit-options").await;

    c.close().await.unwrap();
    drop(driver);
    server.stop().await.unwrap();
    let _ = std::fs::remove_dir_all(&storage);
}
