//! Secrets in a job's YAML are masked before the API hands the text back, as Flink's REST API
//! masks the values of sensitive configuration keys: anybody allowed to read a job may not be
//! allowed to log in to its database.
//!
//! Masked: the value of any key whose name contains `password`, `secret`, `token` or
//! `credential` (so `secret-access-key`), and the password inside a connection string, libpq
//! style (`password=...`) or URL style (`postgres://user:...@host`). A text with nothing to mask
//! is returned as written, comments and layout included; one with secrets is re-serialised from
//! its parsed form, which drops comments.

use std::borrow::Cow;

use serde_yaml::Value;

/// What a masked value reads as.
pub const MASK: &str = "******";

const SENSITIVE: [&str; 4] = ["password", "secret", "token", "credential"];

/// `text` with its secrets masked (see the module docs). A text that does not parse as YAML
/// (a job's text always does: it was accepted) is withheld whole rather than returned unmasked.
pub fn redact(text: &str) -> Cow<'_, str> {
    let Ok(mut value) = serde_yaml::from_str::<Value>(text) else {
        return Cow::Borrowed(
            "# withheld: the job's YAML could not be re-read to mask its secrets\n",
        );
    };
    if !mask(&mut value) {
        return Cow::Borrowed(text);
    }
    match serde_yaml::to_string(&value) {
        Ok(masked) => Cow::Owned(format!("# secrets masked by weir\n{masked}")),
        Err(_) => Cow::Borrowed(
            "# withheld: the job's YAML could not be re-written with its secrets masked\n",
        ),
    }
}

/// Masks secrets in place; returns whether there were any.
fn mask(value: &mut Value) -> bool {
    match value {
        Value::Mapping(map) => {
            let mut masked = false;
            for (key, v) in map.iter_mut() {
                let sensitive = key.as_str().is_some_and(is_sensitive);
                if sensitive && !v.is_null() {
                    *v = Value::String(MASK.to_owned());
                    masked = true;
                } else {
                    masked |= mask(v);
                }
            }
            masked
        }
        Value::Sequence(items) => items.iter_mut().fold(false, |m, v| mask(v) | m),
        Value::Tagged(tagged) => mask(&mut tagged.value),
        Value::String(s) => match mask_connection_string(s) {
            Some(masked) => {
                *s = masked;
                true
            }
            None => false,
        },
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

fn is_sensitive(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SENSITIVE.iter().any(|word| key.contains(word))
}

/// `s` with the passwords of a connection string masked, or `None` if it has none.
fn mask_connection_string(s: &str) -> Option<String> {
    let url = mask_url_password(s);
    let text = url.as_deref().unwrap_or(s);
    match mask_keyword_password(text) {
        Some(masked) => Some(masked),
        None => url,
    }
}

/// `scheme://user:password@host...` → `scheme://user:******@host...`.
fn mask_url_password(s: &str) -> Option<String> {
    let authority_start = s.find("://")? + 3;
    let rest = &s[authority_start..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = rest[..authority_len].rfind('@')?;
    let colon = rest[..at].find(':')?;
    let password = authority_start + colon + 1..authority_start + at;
    if password.is_empty() {
        return None;
    }
    let mut masked = s.to_owned();
    masked.replace_range(password, MASK);
    Some(masked)
}

/// libpq's `password=value` or `password = 'quoted value'` → `password=******`, every time it
/// appears.
fn mask_keyword_password(s: &str) -> Option<String> {
    let lower = s.to_ascii_lowercase();
    let mut out = String::with_capacity(s.len());
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = lower[from..].find("password") {
        let key_end = from + found + "password".len();
        let starts_word =
            from + found == 0 || lower.as_bytes()[from + found - 1].is_ascii_whitespace();
        let after_key = skip_spaces(s, key_end);
        if !starts_word || !s[after_key..].starts_with('=') {
            from = key_end;
            continue;
        }
        let value_start = skip_spaces(s, after_key + 1);
        let value_end = value_end(s, value_start);
        out.push_str(&s[copied..value_start]);
        out.push_str(MASK);
        copied = value_end;
        from = value_end;
    }
    if copied == 0 {
        return None;
    }
    out.push_str(&s[copied..]);
    Some(out)
}

fn skip_spaces(s: &str, at: usize) -> usize {
    at + s[at..].len() - s[at..].trim_start().len()
}

/// Where a libpq value starting at `start` ends: after its closing quote (backslash escapes
/// the next character), or at the next whitespace.
fn value_end(s: &str, start: usize) -> usize {
    let bytes = s.as_bytes();
    if bytes.get(start) != Some(&b'\'') {
        return s[start..]
            .find(char::is_whitespace)
            .map_or(s.len(), |n| start + n);
    }
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\'' => return i + 1,
            _ => i += 1,
        }
    }
    s.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_without_secrets_comes_back_as_written() {
        let text = "# a comment\nname: q1\nsinks:\n  out: {kind: stdout}\n";
        assert!(matches!(redact(text), Cow::Borrowed(t) if t == text));
    }

    #[test]
    fn sensitive_keys_are_masked_wherever_they_are() {
        let text = "name: j\ncheckpoint:\n  storage:\n    url: s3://b/p\n    access-key-id: AKIA\n    \
                    secret-access-key: hunter2\nsinks:\n  - {Password: p1, api-token: t1}\n";
        let out = redact(text);
        for secret in ["hunter2", "p1", "t1"] {
            assert!(!out.contains(secret), "{secret} left in:\n{out}");
        }
        assert!(out.contains("AKIA"), "a key id is not a secret:\n{out}");
        assert!(out.contains("s3://b/p"));
        let back: Value = serde_yaml::from_str(&out).expect("still YAML");
        assert_eq!(back["checkpoint"]["storage"]["secret-access-key"], MASK);
    }

    #[test]
    fn connection_string_passwords_are_masked() {
        let cases = [
            (
                "host=db user=u password=hunter2 dbname=d",
                "host=db user=u password=****** dbname=d",
            ),
            (
                "password = 'hunter 2\\' x' host=db",
                "password = ****** host=db",
            ),
            (
                "postgres://u:hunter2@db:5432/d?sslmode=off",
                "postgres://u:******@db:5432/d?sslmode=off",
            ),
            ("PASSWORD=x", "PASSWORD=******"),
        ];
        for (given, want) in cases {
            assert_eq!(
                mask_connection_string(given).as_deref(),
                Some(want),
                "{given}"
            );
        }
        for untouched in [
            "host=db user=u dbname=d",
            "postgres://u@db/d",
            "passwordless=1",
            "my-password-file=/x",
        ] {
            assert_eq!(mask_connection_string(untouched), None, "{untouched}");
        }
        let text = "sinks:\n  out:\n    kind: postgres\n    connection: host=db password=hunter2\n";
        let out = redact(text);
        assert!(!out.contains("hunter2"), "{out}");
        assert!(out.contains("host=db password=******"), "{out}");
    }

    #[test]
    fn a_text_that_is_not_yaml_is_withheld() {
        assert!(redact("a: [unclosed").starts_with("# withheld"));
    }
}
