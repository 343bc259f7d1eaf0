//! The crate builds with and without the feature `ucx`, and says which (without it, it is empty
//! and needs no library).

#[test]
fn the_crate_builds_and_says_whether_it_has_ucx() {
    assert_eq!(tessera_ucx::ENABLED, cfg!(feature = "ucx"));
}
