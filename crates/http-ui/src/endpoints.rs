//! Where a submitted job may send requests: the network counterpart of [`crate::paths`].
//!
//! A job's `checkpoint.storage` may name an S3 endpoint, a Kafka source or sink its brokers, a
//! NATS source or sink its servers, a PostgreSQL sink its database, and the server then
//! connects there, from inside its own network (and, for S3, signed with its own credentials
//! if the job names none). A server does not let its clients pick such destinations: the
//! endpoints a submitted job may name come from the server ([`Endpoints`]: `weir serve
//! --allow-endpoint URL`, where the URL is `http(s)://host:port` for S3, `kafka://host:port`
//! for a broker, `nats://host:port` for a NATS server, `postgres://host:port` for a database),
//! and by default only the server's own configured storage is reachable:
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
//! - every broker of `bootstrap-servers`, every NATS server of `servers` and every host (and
//!   `hostaddr`) of a PostgreSQL `connection` must be allowed, with its port (9092, 4222 and
//!   5432 when left out); a database reached over a Unix socket is
//!   `postgres://localhost:<port>`;
//! - a Kafka client's `properties` may not name files, commands, libraries or URLs
//!   (`ssl.key.location`, `sasl.kerberos.kinit.cmd`, `plugin.library.paths`,
//!   `sasl.oauthbearer.token.endpoint.url`, ...): librdkafka would read, run, load or call them
//!   on the server's machine; for the same reason a NATS `creds-file` and a PostgreSQL
//!   `sslrootcert` are refused in submitted jobs.
//!
//! Hosts are compared as the S3 client's URL parser reads them (the WHATWG rules of the `url`
//! crate, which `reqwest` uses; brokers' and databases' hosts are read by the same rules), so
//! `http://2852039166/` is `169.254.169.254` here too. A name listed by the operator is trusted
//! to stay where it points. A name allowed only by `*` is resolved when the job is checked, and
//! refused if any of its addresses would be refused written as a literal (a name pointing at
//! `169.254.169.254` is that address), or if it does not resolve. DNS may answer otherwise
//! later; where the client lets weir resolve for it, the check is made again at every
//! connection, on the addresses it then connects to: the S3 client asks [`Endpoints::guard`]
//! (see [`AddressGuard`]). Kafka's client (librdkafka) and PostgreSQL's resolve names
//! themselves, so for them the check at submit is all there is.
//!
//! Problems come back with their line, column and key (`checkpoint.storage.endpoint`,
//! `sources.<name>.bootstrap-servers`, `sinks.<name>.connection`) like any other problem of the
//! file. `weir run` applies none of this: its user is the operator.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::sync::Arc;

use weir_checkpoint::object::{AddressGuard, StorageKind};
use weir_runtime::api::connector::Endpoint;
use weir_runtime::spec::problems::{SpecSource, pointer};
use weir_runtime::spec::{JobSpec, Problem, StorageSpec};

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
            format!("`{text}` is not a URL ({e}): write e.g. `https://minio:9000`, `kafka://broker:9092`, `nats://host:4222` or `postgres://db:5432`")
        })?;
        let (scheme, default_port) = match url.scheme() {
            "http" => ("http", 80),
            "https" => ("https", 443),
            "kafka" => ("kafka", 9092),
            "nats" => ("nats", 4222),
            "postgres" | "postgresql" => ("postgres", 5432),
            _ => {
                return Err(format!(
                    "`{text}`: an endpoint is an `http://` or `https://` URL (S3), `kafka://host:port` (a broker), `nats://host:port` (a NATS server) or `postgres://host:port` (a database)"
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
        Self::host_list(servers, "kafka", 9092, "broker")
    }

    /// The servers of a NATS `servers` list (`host:port,...`, each optionally behind
    /// `nats://` or another scheme the client takes, IPv6 in brackets; port 4222 when left
    /// out). The user and password a URL may carry are not part of the origin.
    fn nats_servers(servers: &str) -> Result<Vec<Self>, String> {
        Self::host_list(servers, "nats", 4222, "server")
    }

    /// A list of `[scheme://][user[:password]@]host[:port]` entries, as origins of `scheme`.
    fn host_list(
        servers: &str,
        scheme: &str,
        default_port: u16,
        noun: &str,
    ) -> Result<Vec<Self>, String> {
        let mut out = Vec::new();
        for entry in servers.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let address = entry.split_once("://").map_or(entry, |(_, rest)| rest);
            // A NATS URL may carry a user and password: not where the client connects, and
            // never echoed.
            let (address, entry) = match address.rsplit_once('@') {
                Some((_, host)) if scheme == "nats" => (host, host),
                _ => (address, entry),
            };
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
                None => default_port,
            };
            out.push(Origin::new(scheme, &host, port)?);
        }
        if out.is_empty() {
            return Err(format!("names no {noun}"));
        }
        Ok(out)
    }

    /// The hosts a PostgreSQL connection string (key/value or URL) connects to, read as the
    /// sink's client reads them: every `host` and every `hostaddr`, each with its port.
    fn databases(connection: &str) -> Result<Vec<Self>, String> {
        use tokio_postgres::config::Host;
        let config = weir_runtime::connectors::postgres::tls::driver_config(connection)
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
        match &self.host {
            url::Host::Domain(name) => METADATA_NAMES.contains(&name.as_str()),
            url::Host::Ipv4(ip) => is_link_local_or_metadata(IpAddr::V4(*ip)),
            url::Host::Ipv6(ip) => is_link_local_or_metadata(IpAddr::V6(*ip)),
        }
    }
}

/// Whether `ip` is link-local or a cloud metadata service (an IPv4-mapped IPv6 address as the
/// IPv4 address it maps).
fn is_link_local_or_metadata(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    };
    link_local || METADATA_ADDRESSES.contains(&ip)
}

/// How host names are looked up: the system's resolver (`getaddrinfo`, as the clients look
/// them up), or a function given with [`Endpoints::with_lookup`].
#[derive(Clone)]
struct Lookup(Arc<dyn LookupFn>);

/// What a [`Lookup`] calls: name and port to addresses.
trait LookupFn:
    Fn(&str, u16) -> std::io::Result<Vec<IpAddr>> + Send + Sync + UnwindSafe + RefUnwindSafe
{
}

impl<F> LookupFn for F where
    F: Fn(&str, u16) -> std::io::Result<Vec<IpAddr>> + Send + Sync + UnwindSafe + RefUnwindSafe
{
}

impl Default for Lookup {
    /// The system's resolver: one function for every default allow-list, so that two of them
    /// compare equal (lookups compare by identity).
    fn default() -> Self {
        static SYSTEM: std::sync::LazyLock<Arc<dyn LookupFn>> = std::sync::LazyLock::new(|| {
            Arc::new(|name: &str, port| {
                use std::net::ToSocketAddrs;
                Ok((name, port).to_socket_addrs()?.map(|a| a.ip()).collect())
            })
        });
        Lookup(SYSTEM.clone())
    }
}

impl std::fmt::Debug for Lookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lookup")
    }
}

impl PartialEq for Lookup {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Lookup {}

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
    /// How names allowed by `*` alone are resolved, to check where they point.
    lookup: Lookup,
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

    /// Looks names up with `lookup` (name, port → addresses) instead of the system's resolver:
    /// for tests, which cannot make a name point at a metadata address otherwise.
    pub fn with_lookup(
        mut self,
        lookup: impl Fn(&str, u16) -> std::io::Result<Vec<IpAddr>>
        + Send
        + Sync
        + UnwindSafe
        + RefUnwindSafe
        + 'static,
    ) -> Self {
        self.lookup = Lookup(Arc::new(lookup));
        self
    }

    /// The allow-list as the S3 client applies it at every connection ([`AddressGuard`]).
    pub fn guard(&self) -> Arc<dyn AddressGuard> {
        let trusted = self
            .listed
            .iter()
            .filter(|o| o.is_http())
            .filter_map(|o| match &o.host {
                url::Host::Domain(name) => Some(name.clone()),
                _ => None,
            })
            .collect();
        Arc::new(Guard {
            trusted,
            lookup: self.lookup.clone(),
        })
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
            return self.resolved_refusal(origin, shown);
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
                "nats" => "no NATS servers".to_owned(),
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

    /// Why a job may not reach a host allowed by `*` alone, if it may not: a name is refused
    /// if it does not resolve, or if any of its addresses would be refused as a literal.
    fn resolved_refusal(&self, origin: &Origin, shown: &str) -> Option<String> {
        let url::Host::Domain(name) = &origin.host else {
            return None;
        };
        let addresses = match (self.lookup.0)(name, origin.port.unwrap_or(0)) {
            Ok(addresses) if !addresses.is_empty() => addresses,
            Ok(_) => {
                return Some(format!(
                    "`{shown}`: `{name}` resolves to no address; a server checks where a name points before a job may use it, unless started with `--allow-endpoint {origin}`"
                ));
            }
            Err(e) => {
                return Some(format!(
                    "`{shown}`: `{name}` does not resolve ({e}); a server checks where a name points before a job may use it, unless started with `--allow-endpoint {origin}`"
                ));
            }
        };
        addresses
            .into_iter()
            .find(|ip| is_link_local_or_metadata(*ip))
            .map(|ip| {
                format!(
                    "`{shown}` resolves to {ip}, a link-local or cloud metadata address: a server reaches it only when started with `--allow-endpoint {origin}`"
                )
            })
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

    /// Why a job may not reach the NATS servers of `servers`, if it may not.
    fn nats_refusal(&self, servers: &str) -> Option<String> {
        match Origin::nats_servers(servers) {
            Ok(list) => list.iter().find_map(|s| self.refusal_of(s, &s.to_string())),
            Err(why) => Some(why),
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

/// The allow-list at connection time (see [`AddressGuard`]): a name the operator listed
/// resolves as DNS says; any other (allowed by `*`, or AWS's own hosts for a job that names no
/// endpoint) only if none of its addresses is link-local or a metadata service's, now.
#[derive(Debug)]
struct Guard {
    /// The S3 hosts listed by name: trusted to stay where they point.
    trusted: Vec<String>,
    lookup: Lookup,
}

impl AddressGuard for Guard {
    fn addresses(&self, host: &str) -> Result<Vec<IpAddr>, String> {
        let name = host.trim_end_matches('.').to_ascii_lowercase();
        let trusted = self.trusted.contains(&name);
        if !trusted && METADATA_NAMES.contains(&name.as_str()) {
            return Err(format!(
                "`{host}` is a cloud metadata service, which this server's jobs may not reach"
            ));
        }
        let addresses =
            (self.lookup.0)(&name, 0).map_err(|e| format!("cannot resolve `{host}`: {e}"))?;
        if !trusted && let Some(ip) = addresses.iter().find(|ip| is_link_local_or_metadata(**ip)) {
            return Err(format!(
                "`{host}` now resolves to {ip}, a link-local or cloud metadata address, which this server's jobs may not reach"
            ));
        }
        Ok(addresses)
    }
}

/// Why a setting that names a file on the server is refused in a submitted job (`{what}` is
/// the setting and its client).
const FILE_SETTING: &str =
    "{what} on the server's machine: a submitted job may not set it (`weir run` may)";

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
    if let Some(region) = &config.region
        && (region.is_empty()
            || !region
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    {
        problems.push(source.at_value(
            "/checkpoint/storage/region",
            format!("the region `{region}` may only use letters, digits and `-`"),
        ));
    }
    if let Some(endpoint) = &config.endpoint
        && let Some(why) = endpoints.refusal(endpoint)
    {
        problems.push(source.at_value("/checkpoint/storage/endpoint", why));
    }
    problems
}

/// Problems with the brokers and databases the job's sources and sinks would reach, and with
/// the settings that would act on the server's machine: each connector says what it reaches
/// and reads ([`Hosted`]), at which of its keys.
fn connector_problems(
    source: &SpecSource,
    spec: &JobSpec,
    endpoints: &Endpoints,
    problems: &mut Vec<Problem>,
) {
    let sources = spec
        .sources
        .iter()
        .map(|(name, s)| (pointer(&["sources", name]), s.hosted()));
    let sinks = spec
        .sinks
        .iter()
        .map(|(name, s)| (pointer(&["sinks", name]), s.hosted()));
    for (at, hosted) in sources.chain(sinks) {
        for reach in hosted.endpoints() {
            let why = match &reach.endpoint {
                Endpoint::Kafka { servers } => endpoints.broker_refusal(servers),
                Endpoint::Nats { servers } => endpoints.nats_refusal(servers),
                Endpoint::Postgres { connection } => endpoints.database_refusal(connection),
                Endpoint::ObjectStore { endpoint } => endpoints.refusal(endpoint),
            };
            if let Some(why) = why {
                problems.push(source.at_value(&format!("{at}{}", reach.at), why));
            }
        }
        for file in hosted.server_files() {
            let why = FILE_SETTING.replace("{what}", &file.what);
            let at = format!("{at}{}", file.at);
            problems.push(if file.key {
                source.at_key(&at, why)
            } else {
                source.at_value(&at, why)
            });
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
        assert_eq!(any.refusal("https://localhost:443"), None);
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

    /// Names as a hostile DNS server could answer them.
    fn fake_dns(name: &str, _port: u16) -> std::io::Result<Vec<IpAddr>> {
        let ip = |s: &str| s.parse::<IpAddr>().expect("an address");
        match name {
            "rebind.example" => Ok(vec![ip("93.184.216.34"), ip("169.254.169.254")]),
            "mapped.example" => Ok(vec![ip("::ffff:169.254.169.254")]),
            "alibaba.example" => Ok(vec![ip("100.100.100.200")]),
            "v6.example" => Ok(vec![ip("fe80::1")]),
            "trusted.example" => Ok(vec![ip("169.254.169.254")]),
            "fine.example" => Ok(vec![ip("93.184.216.34"), ip("2606:2800::1")]),
            "empty.example" => Ok(vec![]),
            _ => Err(std::io::Error::other("no such name")),
        }
    }

    #[test]
    fn a_name_allowed_by_star_is_refused_where_its_addresses_would_be() {
        let any = listed(&["*", "http://trusted.example:9000"]).with_lookup(fake_dns);
        for name in [
            "rebind.example",
            "mapped.example",
            "alibaba.example",
            "v6.example",
        ] {
            let why = any
                .refusal(&format!("http://{name}:9000"))
                .unwrap_or_else(|| panic!("{name} allowed"));
            assert!(why.contains("resolves to"), "{why}");
            assert!(why.contains("link-local or cloud metadata"), "{why}");
            assert!(
                why.contains(&format!("--allow-endpoint http://{name}:9000")),
                "{why}"
            );
            let why = any
                .broker_refusal(&format!("fine.example:9092,{name}:9092"))
                .unwrap_or_else(|| panic!("broker {name} allowed"));
            assert!(why.contains("resolves to"), "{why}");
            let why = any
                .database_refusal(&format!("host={name} user=u password=hunter2"))
                .unwrap_or_else(|| panic!("database {name} allowed"));
            assert!(
                why.contains("resolves to") && !why.contains("hunter2"),
                "{why}"
            );
        }
        for name in ["nowhere.example", "empty.example"] {
            let why = any
                .refusal(&format!("https://{name}"))
                .unwrap_or_else(|| panic!("{name} allowed"));
            assert!(why.contains(name) && why.contains("resolve"), "{why}");
        }
        assert_eq!(any.refusal("https://fine.example"), None);
        assert_eq!(any.broker_refusal("fine.example:9092"), None);
        assert_eq!(
            any.refusal("http://trusted.example:9000"),
            None,
            "a listed name is trusted"
        );
        // Without `*`, nothing is resolved: an unlisted name is refused as unlisted.
        let listed_only = listed(&["http://fine.example:9000"]).with_lookup(fake_dns);
        let why = listed_only.refusal("http://rebind.example:9000").unwrap();
        assert!(why.contains("not an endpoint this server"), "{why}");
    }

    #[test]
    fn names_resolve_through_the_systems_resolver() {
        // `localhost` resolves without a DNS server, to loopback: allowed under `*`.
        let any = listed(&["*"]);
        assert_eq!(any.refusal("http://localhost:9000"), None);
        assert_eq!(any.broker_refusal("localhost:9092"), None);
        assert_eq!(any.database_refusal("host=localhost port=5432"), None);
        let guard = any.guard();
        let addresses = guard.addresses("localhost").expect("localhost resolves");
        assert!(addresses.iter().all(IpAddr::is_loopback), "{addresses:?}");
    }

    #[test]
    fn the_guard_checks_names_again_at_every_connection() {
        let any = listed(&["*", "http://trusted.example:9000"]).with_lookup(fake_dns);
        let guard = any.guard();
        for name in [
            "rebind.example",
            "Mapped.Example.",
            "metadata.google.internal",
        ] {
            let why = guard
                .addresses(name)
                .expect_err("a metadata address is refused");
            assert!(
                why.contains("link-local or cloud metadata") || why.contains("metadata service"),
                "{why}"
            );
        }
        assert_eq!(guard.addresses("fine.example").map(|a| a.len()), Ok(2));
        assert!(
            guard.addresses("trusted.example").is_ok(),
            "listed: trusted"
        );
        assert!(guard.addresses("nowhere.example").is_err());
    }

    /// The S3 client really asks the guard: a name that points at a metadata address is never
    /// connected to, one that points at loopback is (and finds nothing listening).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_s3_client_connects_only_where_the_guard_allows() {
        let any = listed(&["*"]).with_lookup(|name, port| match name {
            "loopback.example" => Ok(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]),
            other => fake_dns(other, port),
        });
        let list = |endpoint: &str| {
            let config = weir_checkpoint::StorageConfig {
                url: "s3://weir/guarded".into(),
                endpoint: Some(endpoint.into()),
                region: Some("us-east-1".into()),
                access_key_id: Some("a".into()),
                secret_access_key: Some("b".into()),
                allow_http: Some(true),
                request_timeout: Some(std::time::Duration::from_secs(5)),
                max_retries: Some(0),
            };
            let storage = weir_checkpoint::object::open_guarded(&config, Some(&any.guard()))
                .expect("opens without contacting anything");
            async move {
                let e = weir_checkpoint::JobCheckpoints::new(storage, "guarded")
                    .list()
                    .await
                    .expect_err("nothing serves S3 there");
                let mut text = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    text.push_str(&format!(": {s}"));
                    source = s.source();
                }
                text
            }
        };
        let refused = list("http://rebind.example:9").await;
        assert!(
            refused.contains("link-local or cloud metadata"),
            "{refused}"
        );
        // Port 9 (discard) on loopback: nothing listens, the connection is refused.
        let tried = list("http://loopback.example:9").await;
        assert!(!tried.contains("link-local"), "{tried}");
    }

    #[test]
    fn allow_lists_compare_by_their_entries_and_their_lookup() {
        assert_eq!(listed(&["*"]), listed(&["*"]));
        assert_ne!(listed(&["*"]), listed(&["http://minio:9000"]));
        assert_ne!(listed(&["*"]), listed(&["*"]).with_lookup(fake_dns));
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
        assert_eq!(any.broker_refusal("localhost:1234"), None);
        let why = any
            .broker_refusal("localhost:9092,169.254.169.254:9092")
            .unwrap();
        assert!(why.contains("link-local"), "{why}");
    }

    #[test]
    fn nats_servers_must_each_be_listed_with_their_port() {
        let e = listed(&["nats://127.0.0.1:4222", "nats://nats.internal"]);
        for ok in [
            "127.0.0.1:4222",
            "nats://127.0.0.1:4222, nats.internal",
            "nats://weir:s3cret@nats.internal:4222",
        ] {
            assert_eq!(e.nats_refusal(ok), None, "{ok}");
        }
        let why = e.nats_refusal("127.0.0.1:4223").unwrap();
        assert!(
            why.contains("--allow-endpoint nats://127.0.0.1:4223"),
            "{why}"
        );
        let why = e.nats_refusal("nats://weir:s3cret@evil.example").unwrap();
        assert!(!why.contains("s3cret"), "the password leaked: {why}");
        assert!(why.contains("nats://evil.example:4222"), "{why}");
        // The scheme of the list is `nats`: a broker entry does not let a NATS server through.
        assert!(
            listed(&["kafka://127.0.0.1:4222"])
                .nats_refusal("127.0.0.1:4222")
                .is_some()
        );
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
    fn settings_that_read_files_on_the_server_are_refused_at_their_key() {
        let text = "name: files\n\
            sources:\n  in: {kind: nats, servers: 127.0.0.1, stream: s, creds-file: /etc/shadow}\n\
            sinks:\n  db:\n    kind: postgres\n    from: in\n    table: t\n    \
            connection: host=127.0.0.1 sslmode=verify-full sslrootcert=/etc/shadow\n";
        let loaded = weir_runtime::spec::load::parse_str("job.yaml", text, &[]).unwrap();
        let e = listed(&["nats://127.0.0.1:4222", "postgres://127.0.0.1:5432"]);
        let problems = check(&loaded.source, &loaded.spec, &e);
        let at = |path: &str| {
            problems
                .iter()
                .find(|p| p.path == path)
                .unwrap_or_else(|| panic!("no problem at {path}: {problems:?}"))
                .message
                .clone()
        };
        assert!(at("sources.in.creds-file").contains("`creds-file`"));
        let why = at("sinks.db.connection");
        assert!(
            why.contains("`sslrootcert`") && why.contains("`weir run` may"),
            "{why}"
        );
        // Without the file, the same database is fine.
        let text = text
            .replace(" sslrootcert=/etc/shadow", "")
            .replace(", creds-file: /etc/shadow", "");
        let loaded = weir_runtime::spec::load::parse_str("job.yaml", &text, &[]).unwrap();
        assert_eq!(check(&loaded.source, &loaded.spec, &e), vec![]);
    }

    #[test]
    fn kafka_properties_that_touch_the_servers_machine_are_refused_at_their_key() {
        let properties = [
            "ssl.key.location",
            "ssl.ca.location",
            "sasl.kerberos.kinit.cmd",
            "plugin.library.paths",
            "sasl.oauthbearer.token.endpoint.url",
            "SSL.Keystore.Location",
            "security.protocol",
            "sasl.mechanism",
            "sasl.username",
            "socket.timeout.ms",
        ];
        let listed_properties: Vec<String> = properties
            .iter()
            .map(|k| format!("      {k}: x\n"))
            .collect();
        let text = format!(
            "name: props\nsources:\n  in:\n    kind: kafka\n    bootstrap-servers: \
             127.0.0.1:9092\n    topic: t\n    format: raw\n    properties:\n{}\
             sinks:\n  out: {{kind: blackhole, from: in}}\n",
            listed_properties.concat()
        );
        let loaded = weir_runtime::spec::load::parse_str("job.yaml", &text, &[]).unwrap();
        let problems = check(
            &loaded.source,
            &loaded.spec,
            &listed(&["kafka://127.0.0.1:9092"]),
        );
        let refused: Vec<&str> = problems
            .iter()
            .map(|p| {
                assert!(p.message.contains("`weir run` may"), "{}", p.message);
                p.path.trim_start_matches("sources.in.properties.")
            })
            .collect();
        assert_eq!(refused, &properties[..6], "{problems:?}");
    }
}
