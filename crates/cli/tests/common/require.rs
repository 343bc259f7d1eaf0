//! What a test does when this machine lacks what its check needs (a browser, root, a program):
//! under CI it fails, saying what is missing and why, for a check that did not run must not pass
//! there; elsewhere it says on stderr that it skips. Tests of other crates include this file by
//! its path, so that there is one such rule.

/// Whether the test may go on to its check: `true` when `available`. When not: under CI (the
/// environment variable `CI` is `true` or `1`) it panics with `what` (what is missing and why
/// the test needs it); elsewhere it prints that the test skips and why, and returns `false`,
/// on which the test returns.
pub fn require(what: &str, available: bool) -> bool {
    if available {
        return true;
    }
    let ci = std::env::var("CI").is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "1"));
    assert!(!ci, "cannot run this test's check: {what}. Under CI (CI=true) a test that cannot run its check fails.");
    eprintln!("skipped: {what} (under CI=true this fails)");
    false
}
