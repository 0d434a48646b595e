//! `${VAR}` and `${VAR:-default}` in job files: secrets (a NATS token, a database password)
//! and per-machine settings read from the environment when the job is loaded, so that the
//! file itself can be committed and shown.
//!
//! Any string value may hold references, alone or inside other text (`nats://${HOST}:4222`);
//! keys are never substituted. `${VAR:-default}` takes `default` when `VAR` is unset or empty
//! (as the shell does); `$${` writes a literal `${`. A reference to a variable that is unset
//! and has no default is a problem of the file at the value's line and column, like any other.
//!
//! Who may read what is the [`Environment`]'s decision: `weir run` and `weir validate` read the
//! process's own ([`ProcessEnv`]); `weir serve` lets submitted jobs read only the variables its
//! operator lists (`--allow-env`), since a job that can name `AWS_SECRET_ACCESS_KEY` could send
//! it anywhere it may write. The values read are kept ([`Substituted::values`]) so that the
//! server masks them wherever it shows the job, as it masks passwords written in the file.

use serde_json::Value;

use super::positions::escape_segment;

/// Where `${VAR}` values come from.
pub trait Environment {
    /// The value of `name` (`Ok(None)` when unset), or why the job may not read it.
    fn var(&self, name: &str) -> Result<Option<String>, String>;
}

/// The process's environment, every variable readable (`weir run`, `weir validate`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessEnv;

impl Environment for ProcessEnv {
    fn var(&self, name: &str) -> Result<Option<String>, String> {
        Ok(std::env::var(name).ok())
    }
}

/// The process's environment, restricted to listed names (`weir serve --allow-env NAME`); a
/// name ending in `*` allows every variable with that prefix.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedEnv {
    names: Vec<String>,
}

impl AllowedEnv {
    pub fn new(names: impl IntoIterator<Item = String>) -> Self {
        Self {
            names: names.into_iter().collect(),
        }
    }

    fn allows(&self, name: &str) -> bool {
        self.names.iter().any(|n| match n.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => n == name,
        })
    }
}

impl Environment for AllowedEnv {
    fn var(&self, name: &str) -> Result<Option<String>, String> {
        if self.allows(name) {
            Ok(std::env::var(name).ok())
        } else {
            Err(format!(
                "this server does not let submitted jobs read the environment variable `{name}`; \
                 its operator can allow it with `weir serve --allow-env {name}`"
            ))
        }
    }
}

/// What substitution did to a tree.
#[derive(Debug, Default)]
pub struct Substituted {
    /// The values read from the environment (not defaults written in the file), for masking.
    pub values: Vec<String>,
    /// (JSON pointer of the value, why it could not be substituted).
    pub problems: Vec<(String, String)>,
}

/// Replaces every `${VAR}` in the string values of `tree`. A walk with an explicit stack: the
/// loader has already bounded the tree's depth and size.
pub fn substitute(tree: &mut Value, env: &dyn Environment) -> Substituted {
    let mut out = Substituted::default();
    let mut stack: Vec<(String, &mut Value)> = vec![(String::new(), tree)];
    while let Some((at, value)) = stack.pop() {
        match value {
            Value::String(s) if s.contains('$') => match expand(s, env, &mut out.values) {
                Ok(Some(expanded)) => *s = expanded,
                Ok(None) => {}
                Err(message) => out.problems.push((at, message)),
            },
            Value::Object(map) => {
                for (k, v) in map.iter_mut() {
                    stack.push((format!("{at}/{}", escape_segment(k)), v));
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter_mut().enumerate() {
                    stack.push((format!("{at}/{i}"), v));
                }
            }
            _ => {}
        }
    }
    out
}

/// `text` with its references replaced; `Ok(None)` when it has none (nor `$${`).
fn expand(
    text: &str,
    env: &dyn Environment,
    read: &mut Vec<String>,
) -> Result<Option<String>, String> {
    if !text.contains("${") {
        return Ok(None);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        if let Some(tail) = after.strip_prefix("$${") {
            out.push_str("${");
            rest = tail;
        } else if let Some(tail) = after.strip_prefix("${") {
            let end = tail.find('}').ok_or_else(|| {
                format!("`{after}` opens a `${{` reference that is never closed with `}}`")
            })?;
            let inner = &tail[..end];
            let (name, default) = match inner.split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (inner, None),
            };
            if name.is_empty()
                || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                || name.as_bytes()[0].is_ascii_digit()
            {
                return Err(format!(
                    "`${{{inner}}}` does not name an environment variable (letters, digits and \
                     `_`, not starting with a digit), as in `${{NATS_TOKEN}}` or \
                     `${{NATS_TOKEN:-default}}`"
                ));
            }
            match (env.var(name)?.filter(|v| !v.is_empty()), default) {
                (Some(value), _) => {
                    out.push_str(&value);
                    read.push(value);
                }
                (None, Some(default)) => out.push_str(default),
                (None, None) => {
                    return Err(format!(
                        "the environment variable `{name}` is not set (write `${{{name}:-default}}` \
                         to give a default)"
                    ));
                }
            }
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = &after[1..];
        }
    }
    out.push_str(rest);
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Fixed(HashMap<&'static str, &'static str>);

    impl Environment for Fixed {
        fn var(&self, name: &str) -> Result<Option<String>, String> {
            if name == "FORBIDDEN" {
                return Err("not allowed".into());
            }
            Ok(self.0.get(name).map(|v| (*v).to_owned()))
        }
    }

    fn env() -> Fixed {
        Fixed(HashMap::from([
            ("TOKEN", "s3cret"),
            ("HOST", "nats.local"),
            ("EMPTY", ""),
        ]))
    }

    #[test]
    fn references_are_replaced_inside_text_with_defaults_and_escapes() {
        let mut read = Vec::new();
        let e = env();
        let x = |t: &str, read: &mut Vec<String>| expand(t, &e, read);
        assert_eq!(x("${TOKEN}", &mut read), Ok(Some("s3cret".into())));
        assert_eq!(
            x("nats://${HOST}:4222", &mut read),
            Ok(Some("nats://nats.local:4222".into()))
        );
        assert_eq!(x("${UNSET:-dflt}", &mut read), Ok(Some("dflt".into())));
        assert_eq!(x("${EMPTY:-dflt}", &mut read), Ok(Some("dflt".into())));
        assert_eq!(x("${UNSET:-}", &mut read), Ok(Some(String::new())));
        assert_eq!(
            x("cost $5, $${HOME}", &mut read),
            Ok(Some("cost $5, ${HOME}".into()))
        );
        assert_eq!(x("no reference $HOME", &mut read), Ok(None));
        // Only values that came from the environment are kept for masking.
        assert_eq!(read, ["s3cret", "nats.local"]);
    }

    #[test]
    fn unset_bad_unclosed_and_forbidden_references_are_problems() {
        let mut read = Vec::new();
        let e = env();
        let err = |t: &str, read: &mut Vec<String>| expand(t, &e, read).unwrap_err();
        assert!(err("${UNSET}", &mut read).contains("`UNSET` is not set"));
        assert!(err("${1X}", &mut read).contains("does not name"));
        assert!(err("${A-B}", &mut read).contains("does not name"));
        assert!(err("${TOKEN", &mut read).contains("never closed"));
        assert_eq!(err("${FORBIDDEN}", &mut read), "not allowed");
        assert!(read.is_empty());
    }

    #[test]
    fn a_tree_is_substituted_in_values_only_with_problems_at_their_pointers() {
        let mut tree = super::super::yaml::parse(
            "name: ${HOST}\n${TOKEN}: 1\nsinks:\n  out: {password: '${TOKEN}', list: [a, '${NOPE}']}\n",
        )
        .unwrap()
        .value;
        let done = substitute(&mut tree, &env());
        assert_eq!(tree["name"], Value::from("nats.local"));
        assert_eq!(tree["sinks"]["out"]["password"], Value::from("s3cret"));
        assert!(tree.get("${TOKEN}").is_some(), "keys are left alone");
        assert_eq!(
            done.problems,
            [(
                "/sinks/out/list/1".to_owned(),
                "the environment variable `NOPE` is not set (write `${NOPE:-default}` to give a \
                 default)"
                    .to_owned()
            )]
        );
        let mut values = done.values;
        values.sort();
        assert_eq!(values, ["nats.local", "s3cret"]);
    }

    #[test]
    fn the_server_reads_only_listed_variables() {
        let allowed = AllowedEnv::new(["WEIR_NATS_*".to_owned(), "PGPASSWORD".to_owned()]);
        assert!(allowed.allows("WEIR_NATS_TOKEN") && allowed.allows("PGPASSWORD"));
        assert!(!allowed.allows("AWS_SECRET_ACCESS_KEY") && !allowed.allows("PGPASSWORD2"));
        let why = allowed.var("AWS_SECRET_ACCESS_KEY").unwrap_err();
        assert!(why.contains("--allow-env AWS_SECRET_ACCESS_KEY"), "{why}");
    }
}
