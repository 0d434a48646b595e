//! Connection strings with libpq's TLS settings, and connections over rustls.
//!
//! A connection string may say `sslmode` and `sslrootcert` as libpq reads them, in the
//! key/value form (`host=db sslmode=verify-full sslrootcert=/etc/ca.pem`) or as URL query
//! parameters (`postgresql://db/app?sslmode=require`):
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | |
//! | `prefer` (the default, as in libpq) | if the server offers it | not checked |
//! | `require` | always | not checked, unless `sslrootcert` is given: then as `verify-ca` |
//! | `verify-ca` | always | signed by a trusted root |
//! | `verify-full` | always | signed by a trusted root, and for the host connected to |
//!
//! Trusted roots are the certificates of the `sslrootcert` PEM file, else the system's. The
//! modes that check nothing protect against listening, not against a server in the middle,
//! as in libpq. tokio-postgres knows only `disable`, `prefer` and `require` and no
//! `sslrootcert`, so those two settings are taken out of the string here and the rest is
//! parsed by tokio-postgres as before.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use tokio::task::JoinHandle;
use tokio_postgres::config::SslMode as DriverMode;

/// libpq's `sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self, String> {
        Ok(match value {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            // libpq's `allow` tries without TLS first; nothing here needs it.
            other => {
                return Err(format!(
                    "sslmode `{other}` is not one of disable, prefer, require, verify-ca, verify-full"
                ));
            }
        })
    }
}

/// How to reach a PostgreSQL server: the driver's settings and the TLS to use.
#[derive(Clone)]
pub struct PgConnect {
    pub config: tokio_postgres::Config,
    pub mode: SslMode,
    /// `None` for `sslmode=disable`.
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
}

impl std::fmt::Debug for PgConnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgConnect")
            .field("config", &self.config)
            .field("mode", &self.mode)
            .finish()
    }
}

impl PgConnect {
    /// Reads `connection` (key/value or URL). Errors say what is wrong without repeating the
    /// string, which may hold a password.
    pub fn parse(connection: &str) -> Result<Self, String> {
        let (mut config, mode, root) =
            settings(connection).map_err(|e| format!("the connection string is not valid: {e}"))?;
        let mode = match (mode, &root) {
            (Some(SslMode::Require), Some(_)) => SslMode::VerifyCa,
            (Some(mode), _) => mode,
            (None, _) => SslMode::Prefer,
        };
        config.ssl_mode(match mode {
            SslMode::Disable => DriverMode::Disable,
            SslMode::Prefer => DriverMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => DriverMode::Require,
        });
        let tls = match mode {
            SslMode::Disable => None,
            _ => Some(tokio_postgres_rustls::MakeRustlsConnect::new(
                client_config(mode, root.as_deref())?,
            )),
        };
        Ok(Self { config, mode, tls })
    }

    /// Connects, and spawns the task that drives the connection's socket: the handle ends it.
    pub async fn connect(
        &self,
    ) -> Result<(tokio_postgres::Client, JoinHandle<()>), tokio_postgres::Error> {
        async fn drive<S, T>(connection: tokio_postgres::Connection<S, T>)
        where
            S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
            T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
        {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "postgres connection ended");
            }
        }
        Ok(match &self.tls {
            None => {
                let (client, connection) = self.config.connect(tokio_postgres::NoTls).await?;
                (client, tokio::spawn(drive(connection)))
            }
            Some(tls) => {
                let (client, connection) = self.config.connect(tls.clone()).await?;
                (client, tokio::spawn(drive(connection)))
            }
        })
    }
}

/// The driver's settings of `connection`, its TLS settings left out: the hosts and ports it
/// names, for checks that need only those.
pub fn driver_config(connection: &str) -> Result<tokio_postgres::Config, String> {
    settings(connection).map(|(config, _, _)| config)
}

/// The `sslrootcert` file `connection` names, if it names one (and reads).
pub fn root_certificate_file(connection: &str) -> Option<String> {
    split_tls_settings(connection)
        .ok()
        .and_then(|(_, _, root)| root)
}

/// The driver's settings of `connection`, and its `sslmode` and `sslrootcert`.
fn settings(
    connection: &str,
) -> Result<(tokio_postgres::Config, Option<SslMode>, Option<String>), String> {
    let (rest, mode, root) = split_tls_settings(connection)?;
    let config = rest
        .parse()
        .map_err(|e: tokio_postgres::Error| e.to_string())?;
    Ok((config, mode, root))
}

/// Takes `sslmode` and `sslrootcert` out of a connection string: the rest, and their values.
fn split_tls_settings(
    connection: &str,
) -> Result<(String, Option<SslMode>, Option<String>), String> {
    let trimmed = connection.trim_start();
    if trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://") {
        return split_url(trimmed);
    }
    let mut rest = String::with_capacity(connection.len());
    let (mut mode, mut root) = (None, None);
    for (key, value) in key_values(connection)? {
        match key.as_str() {
            "sslmode" => mode = Some(SslMode::parse(&value)?),
            "sslrootcert" => root = Some(value),
            _ => {
                // Quoted, so any value tokio-postgres read before reads the same.
                let quoted = value.replace('\\', "\\\\").replace('\'', "\\'");
                rest.push_str(&format!("{key}='{quoted}' "));
            }
        }
    }
    Ok((rest, mode, root))
}

/// The pairs of a key/value connection string, read as libpq reads them: `key = value`
/// separated by white space, a value single-quoted or not, `\` escaping the next character.
fn key_values(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut chars = text.chars().peekable();
    let mut pairs = Vec::new();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(format!("`{key}` has no `=` and value"));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                    None => {
                        return Err(format!("the value of `{key}` has no closing quote"));
                    }
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
}

/// [`split_tls_settings`] for a URL: the two settings come out of its query.
fn split_url(url: &str) -> Result<(String, Option<SslMode>, Option<String>), String> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None, None));
    };
    let (mut mode, mut root) = (None, None);
    let mut kept = Vec::new();
    for part in query.split('&') {
        let decoded = url::form_urlencoded::parse(part.as_bytes()).next();
        match decoded {
            Some((k, v)) if k == "sslmode" => mode = Some(SslMode::parse(&v)?),
            Some((k, v)) if k == "sslrootcert" => root = Some(v.into_owned()),
            _ => kept.push(part),
        }
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((rest, mode, root))
}

/// rustls's settings for `mode`, trusting the certificates of `root` (a PEM file) or else the
/// system's.
fn client_config(mode: SslMode, root: Option<&str>) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let config = match mode {
        SslMode::Prefer | SslMode::Require => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked(provider)))
            .with_no_client_auth(),
        _ => {
            let roots = Arc::new(trusted_roots(root)?);
            let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| format!("TLS: {e}"))?;
            if mode == SslMode::VerifyFull {
                builder.with_webpki_verifier(verifier).with_no_client_auth()
            } else {
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(AnyName(verifier)))
                    .with_no_client_auth()
            }
        }
    };
    Ok(config)
}

fn trusted_roots(root: Option<&str>) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    match root {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("sslrootcert `{path}`: {e}"))?;
            if certs.is_empty() {
                return Err(format!("sslrootcert `{path}` holds no certificate"));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| format!("sslrootcert `{path}`: {e}"))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(
                    "no system root certificates found to verify the server with: give one \
                     in `sslrootcert`"
                        .to_owned(),
                );
            }
        }
    }
    Ok(roots)
}

/// `verify-ca`: the chain is checked, the name the certificate is for is not.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require`: encrypted, the certificate not checked (libpq's meaning). The
/// handshake's signatures are still verified, so the session is with the certificate's key.
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use tokio_postgres::config::Host;

    use super::*;

    #[test]
    fn tls_settings_come_out_of_the_key_value_form_and_the_rest_reads_the_same() {
        let text = r"host=db port = 5433 password='it\'s a secret' sslmode=verify-full sslrootcert='/etc/my ca.pem' user=w\ x";
        let (rest, mode, root) = split_tls_settings(text).unwrap();
        assert_eq!(mode, Some(SslMode::VerifyFull));
        assert_eq!(root.as_deref(), Some("/etc/my ca.pem"));
        let config: tokio_postgres::Config = rest.parse().unwrap();
        assert_eq!(config.get_hosts(), &[Host::Tcp("db".into())]);
        assert_eq!(config.get_ports(), &[5433]);
        assert_eq!(config.get_password(), Some(&b"it's a secret"[..]));
        assert_eq!(config.get_user(), Some("w x"));
    }

    #[test]
    fn tls_settings_come_out_of_a_url_query() {
        let (rest, mode, root) = split_tls_settings(
            "postgresql://u:p@db:5433/app?sslmode=require&application_name=w&sslrootcert=%2Fca.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgresql://u:p@db:5433/app?application_name=w");
        assert_eq!(mode, Some(SslMode::Require));
        assert_eq!(root.as_deref(), Some("/ca.pem"));
        let (rest, mode, _) = split_tls_settings("postgres://db/app?sslmode=disable").unwrap();
        assert_eq!(
            (rest.as_str(), mode),
            ("postgres://db/app", Some(SslMode::Disable))
        );
    }

    #[test]
    fn modes_default_to_prefer_and_a_root_certificate_makes_require_verify() {
        assert_eq!(PgConnect::parse("host=db").unwrap().mode, SslMode::Prefer);
        assert_eq!(
            PgConnect::parse("host=db sslmode=disable").unwrap().mode,
            SslMode::Disable
        );
        assert_eq!(
            PgConnect::parse("host=db sslmode=require").unwrap().mode,
            SslMode::Require
        );
        // `require` with a root certificate verifies, as libpq does; this one is missing.
        let e = PgConnect::parse("host=db sslmode=require sslrootcert=/nonexistent/ca.pem")
            .unwrap_err();
        assert!(e.contains("sslrootcert `/nonexistent/ca.pem`"), "{e}");
    }

    #[test]
    fn bad_settings_are_named_and_the_password_is_not_repeated() {
        let e = PgConnect::parse("host=db password=hunter2 sslmode=always").unwrap_err();
        assert!(
            e.contains("sslmode `always`") && e.contains("verify-full"),
            "{e}"
        );
        assert!(!e.contains("hunter2"), "{e}");
        let e = PgConnect::parse("host=db password='hunter2").unwrap_err();
        assert!(
            e.contains("no closing quote") && !e.contains("hunter2"),
            "{e}"
        );
        let e = PgConnect::parse("host=db password").unwrap_err();
        assert!(e.contains("`password` has no `=`"), "{e}");
    }
}
