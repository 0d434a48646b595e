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
        if let Ok(v) = c.execute(script, vec![]).await {
            if done(&v) {
                return v;
            }
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
        "return document.getElementById('act-result').textContent;",
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
        "return !document.getElementById('act-cancel')?.disabled;",
        |v| v == &json!(true),
    )
    .await;
    c.find(Locator::Id("act-cancel"))
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
