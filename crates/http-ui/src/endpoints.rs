//! Where a submitted job may send requests: the network counterpart of [`crate::paths`].
//!
//! A job's `checkpoint.storage` may name an S3 endpoint, and the server then sends requests
//! there, from inside its own network and signed with its own credentials if the job names
//! none. A server does not let its clients pick such destinations: the endpoints a submitted
//! job may name come from the server ([`Endpoints`]: `weir serve --allow-endpoint URL`),
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
//! Hosts are compared as the S3 client's URL parser reads them (the WHATWG rules of the `url`
//! crate, which `reqwest` uses), so `http://2852039166/` is `169.254.169.254` here too. Names
//! are not resolved: a name listed by the operator is trusted to stay where it points.
//!
//! Problems come back with their line, column and key (`checkpoint.storage.endpoint`) like
//! any other problem of the file. `weir run` applies none of this: its user is the operator.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use weir_checkpoint::object::StorageKind;
use weir_runtime::spec::problems::SpecSource;
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
    fn parse(text: &str) -> Result<Self, String> {
        let url = url::Url::parse(text.trim())
            .map_err(|e| format!("`{text}` is not a URL ({e}): write e.g. `https://minio:9000`"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "`{text}`: an S3 endpoint is an `http://` or `https://` URL"
            ));
        }
        let host = match url.host() {
            Some(url::Host::Domain(d)) => {
                url::Host::Domain(d.trim_end_matches('.').to_ascii_lowercase())
            }
            Some(url::Host::Ipv4(ip)) => url::Host::Ipv4(ip),
            Some(url::Host::Ipv6(ip)) => url::Host::Ipv6(ip),
            None => return Err(format!("`{text}` names no host")),
        };
        Ok(Origin {
            scheme: url.scheme().to_owned(),
            host,
            port: url.port_or_known_default(),
        })
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

    /// Why a job may not name `endpoint`, if it may not.
    pub fn refusal(&self, endpoint: &str) -> Option<String> {
        let origin = match Origin::parse(endpoint) {
            Ok(origin) => origin,
            Err(why) => return Some(why),
        };
        if self.listed.contains(&origin) {
            return None;
        }
        if origin.is_link_local_or_metadata() {
            return Some(format!(
                "`{endpoint}` is a link-local or cloud metadata address: a server reaches it only when started with `--allow-endpoint {origin}`"
            ));
        }
        if self.any {
            return None;
        }
        let allowed = if self.listed.is_empty() {
            "none: jobs use the server's own storage by leaving `endpoint` out".to_owned()
        } else {
            self.listed
                .iter()
                .map(|o| format!("`{o}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        Some(format!(
            "`{endpoint}` is not an endpoint this server lets jobs reach (allowed: {allowed}); its operator can add it with `weir serve --allow-endpoint {origin}`"
        ))
    }
}

/// Every problem with the network destinations of `spec` (located through `source`); empty if
/// it may run.
pub fn check(source: &SpecSource, spec: &JobSpec, endpoints: &Endpoints) -> Vec<Problem> {
    let mut problems = Vec::new();
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
}
