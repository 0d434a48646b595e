//! Where a submitted job may send requests: the network counterpart of [`crate::paths`].
//!
//! A job's `checkpoint.storage` may name an S3 endpoint, a Kafka source or sink its brokers, a
//! PostgreSQL sink its database, and the server then connects there, from inside its own
//! network (and, for S3, signed with its own credentials if the job names none). A server
//! does not let its clients pick such destinations: the endpoints a submitted job may name
//! come from the server ([`Endpoints`]: `weir serve --allow-endpoint URL`, where the URL is
//! `http(s)://host:port` for S3, `kafka://host:port` for a broker, `postgres://host:port` for a
//! database), and by default only the server's own configured storage is reachable:
//!
//! - a job that names no endpoint uses the server's (`AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`
//!   or `AWS_ENDPOINT` in the server's environment), or AWS itself when the server has none;
//! - a job that names an endpoint may name the server's own, or one listed with
//!   `--allow-endpoint` (matched by scheme, host and port);
//! - `--allow-endpoint '*'` allows any endpoint, except link-local (`169.254.0.0/16`,
//!   `fe80::/10`) and cloud metadata addresses (`169.254.169.254`, `fd00:ec2::254`,
//!   `metadata.google.internal`, ...), which are reachable only when listed by name;
//! - the bucket and the region become part of the request's URL (`https://s3.<region>.amazonaws.com`,
//!   `https://<bucket>.s3...` with virtual-hosted requests), so they may only use the
//!   characters S3 allows in them: `evil.example#` as a region would move the request to
//!   another host.
//!
//! - every broker of `bootstrap-servers` and every host (and `hostaddr`) of a PostgreSQL
//!   `connection` must be allowed, with its port (9092 and 5432 when left out); a database
//!   reached over a Unix socket is `postgres://localhost:<port>`;
//! - a Kafka client's `properties` may not name files, commands, libraries or URLs
//!   (`ssl.key.location`, `sasl.kerberos.kinit.cmd`, `plugin.library.paths`,
//!   `sasl.oauthbearer.token.endpoint.url`, ...): librdkafka would read, run, load or call them
//!   on the server's machine.
//!
//! Hosts are compared as the S3 client's URL parser reads them (the WHATWG rules of the `url`
//! crate, which `reqwest` uses; brokers' and databases' hosts are read by the same rules), so
//! `http://2852039166/` is `169.254.169.254` here too. Names are not resolved: a name listed
//! by the operator is trusted to stay where it points.
//!
//! Problems come back with their line, column and key (`checkpoint.storage.endpoint`,
//! `sources.<name>.bootstrap-servers`, `sinks.<name>.connection`) like any other problem of the
//! file. `weir run` applies none of this: its user is the operator.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use weir_checkpoint::object::StorageKind;
use weir_runtime::spec::problems::{SpecSource, pointer};
use weir_runtime::spec::{JobSpec, Problem, SinkSpec, SourceSpec, StorageSpec};

/// Names of cloud metadata services, refused unless listed.
const METADATA_NAMES: &[&str] = &[
    "metadata.google.internal",
    "metadata.goog",
    "instance-data.ec2.internal",
];
/// Addresses of cloud metadata services outside the link-local ranges (Alibaba Cloud, AWS's
/// IPv6 one), refused unless listed.
const METADATA_ADDRESSES: &[IpAddr] = &[
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
];
/// The environment variables that give the S3 client its endpoint, highest precedence first
/// (as `object_store` reads them).
const ENDPOINT_VARIABLES: &[&str] = &["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"];

/// One allowed destination: a scheme, a host and a port.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: url::Host<String>,
    port: Option<u16>,
}

impl Origin {
    /// An allow-list entry or an S3 endpoint: `http(s)://`, `kafka://` or `postgres://` (also
    /// `postgresql://`) with a host and an optional port.
    fn parse(text: &str) -> Result<Self, String> {
        let url = url::Url::parse(text.trim()).map_err(|e| {
            format!("`{text}` is not a URL ({e}): write e.g. `https://minio:9000`, `kafka://broker:9092` or `postgres://db:5432`")
        })?;
        let (scheme, default_port) = match url.scheme() {
            "http" => ("http", 80),
            "https" => ("https", 443),
            "kafka" => ("kafka", 9092),
            "postgres" | "postgresql" => ("postgres", 5432),
            _ => {
                return Err(format!(
                    "`{text}`: an endpoint is an `http://` or `https://` URL (S3), `kafka://host:port` (a broker) or `postgres://host:port` (a database)"
                ));
            }
        };
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| format!("`{text}` names no host"))?;
        Origin::new(scheme, host, url.port().unwrap_or(default_port))
    }

    /// `host` read by the WHATWG rules (numeric IPv4 forms included), lower case, without a
    /// trailing dot.
    fn new(scheme: &str, host: &str, port: u16) -> Result<Self, String> {
        let host = match url::Host::parse(host) {
            Ok(url::Host::Domain(d)) => {
                url::Host::Domain(d.trim_end_matches('.').to_ascii_lowercase())
            }
            Ok(url::Host::Ipv4(ip)) => url::Host::Ipv4(ip),
            Ok(url::Host::Ipv6(ip)) => url::Host::Ipv6(ip),
            Err(e) => return Err(format!("`{host}` is not a host name or address ({e})")),
        };
        Ok(Origin {
            scheme: scheme.to_owned(),
            host,
            port: Some(port),
        })
    }

    /// The brokers of a Kafka `bootstrap-servers` list (`host:port,...`, each optionally
    /// behind `<protocol>://`, IPv6 in brackets; port 9092 when left out).
    fn brokers(servers: &str) -> Result<Vec<Self>, String> {
        let mut out = Vec::new();
        for entry in servers.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let address = entry.split_once("://").map_or(entry, |(_, rest)| rest);
            let (host, port) = if let Some(rest) = address.strip_prefix('[') {
                let (host, after) = rest
                    .split_once(']')
                    .ok_or_else(|| format!("`{entry}`: an IPv6 address needs its closing `]`"))?;
                (format!("[{host}]"), after.strip_prefix(':'))
            } else {
                match address.rsplit_once(':') {
                    Some((host, port)) => (host.to_owned(), Some(port)),
                    None => (address.to_owned(), None),
                }
            };
            let port = match port {
                Some(p) => p
                    .parse::<u16>()
                    .map_err(|_| format!("`{entry}`: `{p}` is not a port"))?,
                None => 9092,
            };
            out.push(Origin::new("kafka", &host, port)?);
        }
        if out.is_empty() {
            return Err("names no broker".to_owned());
        }
        Ok(out)
    }

    /// The hosts a PostgreSQL connection string (key/value or URL) connects to, read as the
    /// sink's client reads them: every `host` and every `hostaddr`, each with its port.
    fn databases(connection: &str) -> Result<Vec<Self>, String> {
        use tokio_postgres::config::Host;
        let config: tokio_postgres::Config = connection
            .parse()
            .map_err(|e| format!("not a PostgreSQL connection string: {e}"))?;
        let ports = config.get_ports();
        let port_of = |i: usize| match ports {
            [] => 5432,
            [one] => *one,
            many => many.get(i).copied().unwrap_or(5432),
        };
        let mut out = Vec::new();
        for (i, host) in config.get_hosts().iter().enumerate() {
            let name = match host {
                Host::Tcp(name) => name.clone(),
                // The server's own machine.
                #[cfg(unix)]
                Host::Unix(_) => "localhost".to_owned(),
            };
            out.push(Origin::new("postgres", &name, port_of(i))?);
        }
        for (i, addr) in config.get_hostaddrs().iter().enumerate() {
            let name = match addr {
                IpAddr::V4(v4) => v4.to_string(),
                IpAddr::V6(v6) => format!("[{v6}]"),
            };
            out.push(Origin::new("postgres", &name, port_of(i))?);
        }
        if out.is_empty() {
            // libpq's default: the local socket.
            out.push(Origin::new("postgres", "localhost", port_of(0))?);
        }
        Ok(out)
    }

    /// An S3 endpoint's scheme.
    fn is_http(&self) -> bool {
        matches!(self.scheme.as_str(), "http" | "https")
    }

    /// Whether the host is link-local or a cloud metadata service.
    fn is_link_local_or_metadata(&self) -> bool {
        let ip = match &self.host {
            url::Host::Domain(name) => return METADATA_NAMES.contains(&name.as_str()),
            url::Host::Ipv4(ip) => IpAddr::V4(*ip),
            url::Host::Ipv6(ip) => match ip.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(*ip),
            },
        };
        let link_local = match ip {
            IpAddr::V4(v4) => v4.is_link_local(),
            IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
        };
        link_local || METADATA_ADDRESSES.contains(&ip)
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme, self.host)?;
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

/// The endpoints jobs submitted to a server may reach (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Endpoints {
    /// Reachable by name: the server's own endpoint and those listed.
    listed: Vec<Origin>,
    /// `*` was listed: any endpoint but link-local and metadata addresses.
    any: bool,
}

impl Endpoints {
    /// The server's own storage only: the endpoint of its environment, if any.
    pub fn from_env() -> Self {
        let configured = ENDPOINT_VARIABLES
            .iter()
            .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()));
        let mut endpoints = Endpoints::default();
        if let Some(endpoint) = configured {
            match Origin::parse(&endpoint) {
                Ok(origin) => endpoints.listed.push(origin),
                // The S3 client will refuse it as well, with its own words.
                Err(why) => tracing::warn!(%why, "the server's own S3 endpoint is not usable"),
            }
        }
        endpoints
    }

    /// Also allows `entry`: a URL (`http://minio:9000`; its path is ignored) or `*` (any
    /// endpoint but link-local and metadata addresses).
    pub fn allow(mut self, entry: &str) -> Result<Self, String> {
        if entry.trim() == "*" {
            self.any = true;
        } else {
            let origin = Origin::parse(entry)?;
            if !self.listed.contains(&origin) {
                self.listed.push(origin);
            }
        }
        Ok(self)
    }

    /// Why a job may not name the S3 `endpoint`, if it may not.
    pub fn refusal(&self, endpoint: &str) -> Option<String> {
        match Origin::parse(endpoint) {
            Ok(origin) if matches!(origin.scheme.as_str(), "http" | "https") => {
                self.refusal_of(&origin, endpoint)
            }
            Ok(_) => Some(format!(
                "`{endpoint}`: an S3 endpoint is an `http://` or `https://` URL"
            )),
            Err(why) => Some(why),
        }
    }

    /// Why a job may not reach `origin` (named `shown` in the message), if it may not.
    fn refusal_of(&self, origin: &Origin, shown: &str) -> Option<String> {
        if self.listed.contains(origin) {
            return None;
        }
        if origin.is_link_local_or_metadata() {
            return Some(format!(
                "`{shown}` is a link-local or cloud metadata address: a server reaches it only when started with `--allow-endpoint {origin}`"
            ));
        }
        if self.any {
            return None;
        }
        let same_kind: Vec<String> = self
            .listed
            .iter()
            .filter(|o| o.scheme == origin.scheme || (o.is_http() && origin.is_http()))
            .map(|o| format!("`{o}`"))
            .collect();
        let allowed = if same_kind.is_empty() {
            match origin.scheme.as_str() {
                "kafka" => "no brokers".to_owned(),
                "postgres" => "no databases".to_owned(),
                _ => "none: jobs use the server's own storage by leaving `endpoint` out".to_owned(),
            }
        } else {
            same_kind.join(", ")
        };
        Some(format!(
            "`{shown}` is not an endpoint this server lets jobs reach (allowed: {allowed}); its operator can add it with `weir serve --allow-endpoint {origin}`"
        ))
    }

    /// Why a job may not reach the brokers of `servers`, if it may not.
    fn broker_refusal(&self, servers: &str) -> Option<String> {
        match Origin::brokers(servers) {
            Ok(brokers) => brokers
                .iter()
                .find_map(|b| self.refusal_of(b, &b.to_string())),
            Err(why) => Some(format!("`{servers}`: {why}")),
        }
    }

    /// Why a job may not reach the database of `connection`, if it may not. The message names
    /// the host only: the connection string may hold a password.
    fn database_refusal(&self, connection: &str) -> Option<String> {
        match Origin::databases(connection) {
            Ok(hosts) => hosts
                .iter()
                .find_map(|h| self.refusal_of(h, &h.to_string())),
            Err(why) => Some(why),
        }
    }
}

/// librdkafka properties a submitted job may not set on a server: each makes the client read
/// a file, run a command, load a library or call a URL on the server's machine. Any key
/// ending in `.location`, `.path`, `.paths`, `.cmd`, `.url` or `.file` is refused as well.
const SERVER_REFUSED_PROPERTIES: &[&str] = &[
    "plugin.library.paths",
    "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.keytab",
    "sasl.oauthbearer.token.endpoint.url",
    "ssl.engine.location",
    "ssl.providers",
];

/// Why a Kafka client property may not be set on a server, if it may not.
fn property_refusal(key: &str) -> Option<String> {
    let key = key.trim().to_ascii_lowercase();
    let refused = SERVER_REFUSED_PROPERTIES.contains(&key.as_str())
        || [".location", ".path", ".paths", ".cmd", ".url", ".file"]
            .iter()
            .any(|end| key.ends_with(end));
    refused.then(|| {
        format!(
            "`{key}` makes the Kafka client read a file, run a command or reach a URL on the server's machine: a submitted job may not set it (`weir run` may)"
        )
    })
}

/// Every problem with the network destinations of `spec` (located through `source`); empty if
/// it may run.
pub fn check(source: &SpecSource, spec: &JobSpec, endpoints: &Endpoints) -> Vec<Problem> {
    let mut problems = Vec::new();
    connector_problems(source, spec, endpoints, &mut problems);
    // A storage that does not parse is reported by the job's own validation.
    let Ok(config) = spec.checkpoint.storage_config() else {
        return problems;
    };
    let Ok(StorageKind::S3 { bucket, .. }) = config.kind() else {
        return problems;
    };
    let url_pointer = match &spec.checkpoint.storage {
        Some(StorageSpec::Settings(_)) => "/checkpoint/storage/url",
        _ => "/checkpoint/storage",
    };
    if !bucket
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
    {
        problems.push(source.at_value(
            url_pointer,
            format!(
                "the bucket `{bucket}` may only use letters, digits, `.`, `-` and `_` on a server"
            ),
        ));
    }
    if let Some(region) = &config.region {
        if region.is_empty()
            || !region
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            problems.push(source.at_value(
                "/checkpoint/storage/region",
                format!("the region `{region}` may only use letters, digits and `-`"),
            ));
        }
    }
    if let Some(endpoint) = &config.endpoint {
        if let Some(why) = endpoints.refusal(endpoint) {
            problems.push(source.at_value("/checkpoint/storage/endpoint", why));
        }
    }
    problems
}

/// Problems with the brokers and databases the job's sources and sinks would reach.
fn connector_problems(
    source: &SpecSource,
    spec: &JobSpec,
    endpoints: &Endpoints,
    problems: &mut Vec<Problem>,
) {
    let kafka = |at: String,
                 servers: &str,
                 properties: &indexmap::IndexMap<String, String>,
                 problems: &mut Vec<Problem>| {
        if let Some(why) = endpoints.broker_refusal(servers) {
            problems.push(source.at_value(&format!("{at}/bootstrap-servers"), why));
        }
        for key in properties.keys() {
            if let Some(why) = property_refusal(key) {
                problems
                    .push(source.at_key(&format!("{at}{}", pointer(&["properties", key])), why));
            }
        }
    };
    for (name, s) in &spec.sources {
        if let SourceSpec::Kafka(k) = s {
            kafka(
                pointer(&["sources", name]),
                &k.bootstrap_servers,
                &k.properties,
                problems,
            );
        }
    }
    for (name, s) in &spec.sinks {
        let at = pointer(&["sinks", name]);
        match s {
            SinkSpec::Kafka(k) => kafka(at, &k.bootstrap_servers, &k.properties, problems),
            SinkSpec::Postgres(p) => {
                if let Some(why) = endpoints.database_refusal(&p.connection) {
                    problems.push(source.at_value(&format!("{at}/connection"), why));
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(entries: &[&str]) -> Endpoints {
        entries
            .iter()
            .try_fold(Endpoints::default(), |e, entry| e.allow(entry))
            .unwrap_or_else(|why| panic!("{why}"))
    }

    #[test]
    fn only_listed_endpoints_are_reachable_by_default() {
        let e = listed(&["http://minio:9000"]);
        assert_eq!(e.refusal("http://minio:9000"), None);
        assert_eq!(
            e.refusal("http://MINIO:9000/"),
            None,
            "hosts compare as parsed"
        );
        assert_eq!(e.refusal("http://minio:9000/some/path"), None);
        for other in [
            "http://minio:9001",
            "https://minio:9000",
            "http://evil.example:9000",
            "http://127.0.0.1:9000",
        ] {
            let why = e
                .refusal(other)
                .unwrap_or_else(|| panic!("{other} allowed"));
            assert!(why.contains("--allow-endpoint"), "{why}");
        }
        let none = Endpoints::default();
        assert!(none.refusal("https://s3.amazonaws.com").is_some());
        assert!(none.refusal("not a url").is_some());
        assert!(none.refusal("ftp://minio").is_some());
    }

    #[test]
    fn link_local_and_metadata_addresses_are_refused_even_when_any_endpoint_is_allowed() {
        let any = listed(&["*"]);
        assert_eq!(any.refusal("https://storage.example:443"), None);
        for metadata in [
            "http://169.254.169.254",
            "http://169.254.169.254/latest/meta-data/",
            "http://169.254.170.2",
            "http://2852039166/",
            "http://0xA9FEA9FE/",
            "http://[fd00:ec2::254]",
            "http://[fe80::1]:9000",
            "http://[::ffff:169.254.169.254]",
            "http://metadata.google.internal",
            "http://Metadata.Google.Internal./computeMetadata/v1/",
            "http://100.100.100.200",
        ] {
            let why = any
                .refusal(metadata)
                .unwrap_or_else(|| panic!("{metadata} allowed"));
            assert!(why.contains("link-local or cloud metadata"), "{why}");
        }
        let listed = listed(&["*", "http://169.254.169.254"]);
        assert_eq!(listed.refusal("http://169.254.169.254:80/"), None);
        assert!(listed.refusal("http://169.254.169.253").is_some());
    }

    #[test]
    fn an_allow_list_entry_must_be_an_http_url_or_a_star() {
        assert!(Endpoints::default().allow("minio:9000").is_err());
        assert!(Endpoints::default().allow("file:///tmp").is_err());
        assert!(Endpoints::default().allow("*").is_ok());
        assert!(
            Endpoints::default()
                .allow("https://s3.eu-west-1.amazonaws.com")
                .is_ok()
        );
    }

    #[test]
    fn brokers_must_each_be_listed_with_their_port() {
        let e = listed(&["kafka://broker-a:9092", "kafka://127.0.0.1:19092"]);
        assert_eq!(e.broker_refusal("broker-a:9092"), None);
        assert_eq!(e.broker_refusal("BROKER-A"), None, "port 9092 by default");
        assert_eq!(
            e.broker_refusal("PLAINTEXT://broker-a:9092, 127.0.0.1:19092"),
            None
        );
        assert_eq!(
            e.broker_refusal("2130706433:19092"),
            None,
            "127.0.0.1 spelled as a number"
        );
        for other in [
            "broker-a:9092,broker-b:9092",
            "broker-a:9093",
            "127.0.0.1:9092",
            "[::1]:19092",
            "",
            "broker-a:port",
        ] {
            let why = e
                .broker_refusal(other)
                .unwrap_or_else(|| panic!("{other} allowed"));
            assert!(!why.is_empty());
        }
        let why = e.broker_refusal("broker-b:9092").unwrap();
        assert!(
            why.contains("--allow-endpoint kafka://broker-b:9092"),
            "{why}"
        );
        assert!(
            why.contains("`kafka://broker-a:9092`"),
            "lists brokers only: {why}"
        );
        let any = listed(&["*"]);
        assert_eq!(any.broker_refusal("anything:1234"), None);
        let why = any.broker_refusal("ok:9092,169.254.169.254:9092").unwrap();
        assert!(why.contains("link-local"), "{why}");
    }

    #[test]
    fn a_database_is_reached_only_at_a_listed_host_and_port() {
        let e = listed(&["postgres://db.internal:5432", "postgresql://localhost:5433"]);
        for ok in [
            "host=db.internal user=weir dbname=out",
            "postgresql://weir:secret@db.internal/out",
            "postgres://weir@localhost:5433/out",
            "host=/var/run/postgresql port=5433 dbname=out",
        ] {
            assert_eq!(e.database_refusal(ok), None, "{ok}");
        }
        for refused in [
            "host=db.internal port=5433 dbname=out",
            "host=db.internal hostaddr=169.254.169.254 dbname=out",
            "host=db.internal,evil.example dbname=out",
            "postgresql://weir:hunter2@evil.example/out",
            "dbname=out",
            "not = a connection string = at all",
        ] {
            let why = e
                .database_refusal(refused)
                .unwrap_or_else(|| panic!("{refused} allowed"));
            assert!(!why.contains("hunter2"), "the password leaked: {why}");
        }
    }

    #[test]
    fn kafka_properties_that_touch_the_servers_machine_are_refused() {
        for key in [
            "ssl.key.location",
            "ssl.ca.location",
            "sasl.kerberos.kinit.cmd",
            "plugin.library.paths",
            "sasl.oauthbearer.token.endpoint.url",
            "SSL.Keystore.Location",
        ] {
            assert!(property_refusal(key).is_some(), "{key}");
        }
        for key in [
            "security.protocol",
            "sasl.mechanism",
            "sasl.username",
            "socket.timeout.ms",
        ] {
            assert_eq!(property_refusal(key), None, "{key}");
        }
    }
}
