//! Every built-in scenario over a few seeds (CI runs many more through `tessera sim`).

use tessera_sim::{replay_command, run, scenario};

fn check(name: &str, seeds: u64) {
    let sc = scenario(name).expect("built-in scenario");
    for seed in 0..seeds {
        let r = run(&sc, seed);
        assert!(
            r.violations.is_empty(),
            "{name} seed {seed} failed; replay with `{}`:\n{}",
            replay_command(name, seed),
            r.violations.join("\n")
        );
        assert_eq!(r.events_checked, sc.events, "{name} seed {seed}");
    }
}

#[test]
fn scenario_1x1_lv1_wrap() {
    check("1x1_lv1_wrap", 5);
}

#[test]
fn scenario_2x2_bu_crash() {
    check("2x2_bu_crash", 5);
}

#[test]
fn scenario_4x4_slow_bu() {
    check("4x4_slow_bu", 3);
}

#[test]
fn scenario_2x2_missing_fed() {
    check("2x2_missing_fed", 5);
}

#[test]
fn scenario_8x8_random() {
    check("8x8_random", 3);
}
