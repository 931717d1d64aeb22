//! Every item the README's and the guide's prose names exists (issue 44 item 13): their Rust
//! blocks are compiled as doctests (`src/lib.rs`, `src/guide/mod.rs`), but a name in running
//! text (the README listed `Lease::zxid()`, which never existed) is checked only here.
//!
//! An inline code span `Type::method()`, `Type::field` or `Type::Variant` whose `Type` is one
//! of zkfence's public types must name a function, field or variant of the crate, and a bare
//! `method()` must name a function of it. Other spans (flags, Java, shell) are left
//! alone. And the troubleshooting page has a row for every `Error` variant and every CLI exit
//! code. No server needed: this reads files.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, read.
fn sources(dir: &Path, out: &mut String) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push_str(&std::fs::read_to_string(&path).unwrap());
            out.push('\n');
        }
    }
}

/// The documents whose prose is checked: the README and every guide page.
fn documents() -> Vec<(PathBuf, String)> {
    let mut docs = vec![root().join("README.md")];
    if let Ok(entries) = std::fs::read_dir(root().join("docs/guide")) {
        for entry in entries {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                docs.push(path);
            }
        }
    }
    docs.into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect()
}

/// The inline code spans of `markdown`'s prose (fenced blocks skipped), with their lines.
fn code_spans(markdown: &str) -> Vec<(usize, String)> {
    let mut spans = Vec::new();
    let mut fenced = false;
    for (n, line) in markdown.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(span), Some(_)) = (parts.next(), parts.next()) {
            spans.push((n + 1, span.to_string()));
        }
    }
    spans
}

/// Bare calls the docs may name that are not zkfence's (std's, tokio's): add one here when a
/// page names another crate's method as `name()`.
const NOT_OURS: &[&str] = &[
    "unwrap",
    "expect",
    "clone",
    "drop",
    "into",
    "len",
    "is_empty",
    "spawn",
    "select",
    "sleep",
    "timeout",
    "now",
    "elapsed",
    "main",
    "fetch_max",
];

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

/// What a span names, if it is one the crate must have: `(Some(type), name)` or
/// `(None, function)`.
fn named(span: &str) -> Option<(Option<String>, String)> {
    // `Type::name(...)`, `Type::name`, `name()`, `name(args)`; generics and paths aside.
    let head = span.split('(').next().unwrap_or(span);
    match head.split("::").collect::<Vec<_>>().as_slice() {
        [ty, name] if is_ident(ty) && is_ident(name) => {
            Some((Some(ty.to_string()), name.to_string()))
        }
        // Only `name()`: `min(a, b)` or `zkfence(1)` is not a call of ours.
        [name]
            if span.ends_with("()")
                && is_ident(name)
                && name.starts_with(|c: char| c.is_ascii_lowercase()) =>
        {
            Some((None, name.to_string()))
        }
        _ => None,
    }
}

#[test]
fn every_item_the_docs_name_exists() {
    let mut src = String::new();
    sources(&root().join("src"), &mut src);
    let has_type = |ty: &str| {
        ["pub struct ", "pub enum ", "pub trait ", "pub type "]
            .iter()
            .any(|kw| {
                src.contains(&format!("{kw}{ty} "))
                    || src.contains(&format!("{kw}{ty}<"))
                    || src.contains(&format!("{kw}{ty};"))
                    || src.contains(&format!("{kw}{ty}("))
            })
    };
    let has_fn =
        |name: &str| src.contains(&format!("fn {name}(")) || src.contains(&format!("fn {name}<"));
    let has_variant_or_const = |name: &str| {
        src.lines().any(|l| {
            let l = l.trim_start();
            l.strip_prefix(name).is_some_and(|rest| {
                rest.starts_with(" {")
                    || rest.starts_with(',')
                    || rest.starts_with('(')
                    || rest.is_empty()
            }) || l.contains(&format!("const {name}:"))
        })
    };
    let mut missing = Vec::new();
    let mut checked = 0;
    for (path, text) in documents() {
        for (line, span) in code_spans(&text) {
            let Some((ty, name)) = named(&span) else {
                continue;
            };
            let ok = match &ty {
                // Another crate's type (tokio's, Curator's): not ours to check.
                Some(ty) if !has_type(ty) => continue,
                Some(_) if name.starts_with(|c: char| c.is_ascii_uppercase()) => {
                    has_variant_or_const(&name)
                }
                // A method, or a public field (`OwnerInfo::proclaimed`).
                Some(_) => has_fn(&name) || src.contains(&format!("pub {name}:")),
                None if NOT_OURS.contains(&name.as_str()) => continue,
                None => has_fn(&name),
            };
            checked += 1;
            if !ok {
                missing.push(format!("{}:{line}: `{span}`", path.display()));
            }
        }
    }
    assert!(checked > 20, "the spans were found ({checked} checked)");
    assert!(
        missing.is_empty(),
        "the docs name items zkfence does not have (another crate's bare `name()` goes in \
         NOT_OURS):\n{}",
        missing.join("\n")
    );
}

#[test]
fn a_name_that_does_not_exist_is_caught() {
    // The check itself: the README's old mistake would fail it.
    let mut src = String::new();
    sources(&root().join("src"), &mut src);
    assert_eq!(
        named("Lease::zxid()"),
        Some((Some("Lease".to_string()), "zxid".to_string()))
    );
    assert!(!src.contains("fn zxid("), "Lease::zxid exists after all");
    assert_eq!(named("--no-wait"), None);
    assert_eq!(named("token()"), Some((None, "token".to_string())));
}

#[test]
fn every_cargo_install_is_locked_and_no_manifest_names_a_placeholder() {
    // `--locked`: the dependency versions the CLI was tested with, not the newest.
    for (path, text) in documents() {
        for (n, line) in text.lines().enumerate() {
            if line.contains("cargo install") || line.contains("install --") {
                let joined = format!("{line} {}", text.lines().nth(n + 1).unwrap_or(""));
                if joined.contains("cargo") && joined.contains("install") {
                    assert!(
                        joined.contains("--locked"),
                        "{}:{}: cargo install without --locked: {line}",
                        path.display(),
                        n + 1
                    );
                }
            }
        }
    }
    // The project has no public home yet: its manifests say nothing rather than a made-up
    // address.
    for manifest in [
        "Cargo.toml",
        "cli/Cargo.toml",
        "testcontainers/Cargo.toml",
        "vendor/zookeeper-client/Cargo.toml",
    ] {
        let text = std::fs::read_to_string(root().join(manifest)).unwrap();
        assert!(
            !text.contains("example.invalid") && !text.contains("example.com"),
            "{manifest} names a placeholder address"
        );
    }
}

#[test]
fn troubleshooting_covers_every_error_and_exit_code() {
    // Every variant of `Error` (src/error.rs) has its row on the page...
    let page = std::fs::read_to_string(root().join("docs/guide/troubleshooting.md")).unwrap();
    let errors = std::fs::read_to_string(root().join("src/error.rs")).unwrap();
    let body = errors
        .split_once("pub enum Error {")
        .and_then(|(_, rest)| rest.split_once("\n}\n"))
        .expect("src/error.rs defines `pub enum Error`")
        .0;
    let variants: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("    "))
        .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|l| l.split([' ', ',', '(']).next().unwrap())
        .collect();
    assert!(variants.len() > 15, "{} variants found", variants.len());
    let missing: Vec<_> = variants
        .iter()
        .filter(|v| !page.contains(&format!("| `Error::{v}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/guide/troubleshooting.md has no row for {missing:?}"
    );
    // ...and so does every exit code of the CLI (cli/src/exit.rs), and a signal's 128+N.
    let exit = std::fs::read_to_string(root().join("cli/src/exit.rs")).unwrap();
    let codes: Vec<&str> = exit
        .lines()
        .filter_map(|l| l.strip_prefix("pub const "))
        .filter_map(|l| l.split_once(": u8 = "))
        .map(|(_, code)| code.trim_end_matches(';'))
        .collect();
    assert!(codes.len() > 10, "{} exit codes found", codes.len());
    let missing: Vec<_> = codes
        .iter()
        .chain(["128+N"].iter())
        .filter(|code| !page.contains(&format!("\n| {code} |")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/guide/troubleshooting.md has no row for exit code(s) {missing:?}"
    );
}
