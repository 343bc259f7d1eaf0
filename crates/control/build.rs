//! Gives the crate the short git commit it is built from (`TESSERA_GIT_HASH`, for
//! `tessera_build_info`), or `unknown` when there is none to ask: a source tarball without
//! `.git`, or no git installed. It never fails the build.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What `git` says to `args` in this crate's directory, trimmed; `None` if git is missing or
/// fails (not a checkout).
fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let out = Command::new("git").args(args).current_dir(dir).output().ok()?;
    let said = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !said.is_empty()).then_some(said)
}

/// A path git gives, relative to this crate's directory unless absolute.
fn git_path(args: &[&str]) -> Option<PathBuf> {
    let path = PathBuf::from(git(args)?);
    Some(if path.is_absolute() { path } else { Path::new(&std::env::var_os("CARGO_MANIFEST_DIR")?).join(path) })
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let hash = git(&["rev-parse", "--short", "HEAD"]);
    // Built again when the commit changes: HEAD moves to another branch or commit (a worktree
    // has a HEAD of its own), or the branch it names moves (a loose ref, or packed ones).
    // Only files that exist are named: cargo builds again every time for one that does not.
    if hash.is_some() {
        let head = git_path(&["rev-parse", "--git-path", "HEAD"]);
        let branch = git(&["symbolic-ref", "-q", "HEAD"]).and_then(|r| git_path(&["rev-parse", "--git-path", &r]));
        let packed = git_path(&["rev-parse", "--git-path", "packed-refs"]);
        for path in [head, branch, packed].into_iter().flatten().filter(|p| p.exists()) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    println!("cargo:rustc-env=TESSERA_GIT_HASH={}", hash.as_deref().unwrap_or("unknown"));
}
