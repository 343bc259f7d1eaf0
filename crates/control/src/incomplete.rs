//! The rule that says how many incomplete events (built with a FED missing) a run may build and
//! still succeed ([`IncompleteRule`]), and the summary's line of it.

use serde_json::json;
use tessera_config::SystemConfig;

/// How many incomplete events (built with a FED missing) a run may build and still succeed,
/// and which rule says so: `--max-incomplete N` if given; otherwise none when no fault is
/// configured in the system file (incomplete data is then a failure of the event builder), and
/// any number when faults are (they make events incomplete on purpose).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncompleteRule {
    /// The most incomplete events allowed; `None`: any number.
    max: Option<u64>,
    /// Which rule set `max` and why, as the summary says it after "N allowed, ".
    rule: String,
}

impl IncompleteRule {
    /// The rule for `cfg` with `--max-incomplete` given or not.
    pub fn new(cfg: &SystemConfig, max_incomplete: Option<u64>) -> Self {
        let faulty: Vec<String> = cfg
            .rus
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.faults.is_empty())
            .map(|(i, r)| format!("rus[{i}].faults: {}", r.faults.join(", ")))
            .collect();
        match (max_incomplete, faulty.is_empty()) {
            (Some(n), _) => IncompleteRule { max: Some(n), rule: format!("by --max-incomplete {n}") },
            (None, true) => IncompleteRule {
                max: Some(0),
                rule: "because no fault is configured (rus[i].faults); --max-incomplete N allows N".to_string(),
            },
            (None, false) => IncompleteRule {
                max: None,
                rule: format!("because faults are configured ({}); --max-incomplete N sets a limit", faulty.join("; ")),
            },
        }
    }

    /// Whether `incomplete` events are within the rule.
    pub fn allows(&self, incomplete: u64) -> bool {
        self.max.is_none_or(|max| incomplete <= max)
    }

    /// The summary's `incomplete_check` of `incomplete` events.
    pub fn to_json(&self, incomplete: u64) -> serde_json::Value {
        json!({
            "incomplete": incomplete,
            "max_incomplete": self.max,
            "rule": self.rule,
            "within_limit": self.allows(incomplete),
        })
    }
}

/// The summary's line on incomplete events, when it says anything: some were built, or a rule
/// other than "none, no fault being configured" applies. `None` on a clean run (the `events:`
/// line says 0 incomplete already).
pub fn incomplete_line_if_any(incomplete: u64, rule: &IncompleteRule, noun: &str) -> Option<String> {
    (incomplete > 0 || rule.max != Some(0)).then(|| incomplete_line(incomplete, rule, noun))
}

/// The summary's line of the incomplete-event rule: how many there are, how many are allowed
/// and by which rule, and whether the run keeps to it. `noun` names the protocol's units
/// (`events`, or in orbit mode `orbits`, which the rule counts alike).
pub fn incomplete_line(incomplete: u64, rule: &IncompleteRule, noun: &str) -> String {
    format!(
        "incomplete {noun}: {incomplete}, {}, {}  {}",
        rule.max.map_or("any number allowed".to_string(), |m| format!("at most {m} allowed")),
        rule.rule,
        if rule.allows(incomplete) { "within the limit" } else { "ABOVE THE LIMIT" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incomplete_events_are_allowed_by_configured_faults_or_the_command_line_only() {
        let mut cfg = SystemConfig::default();
        let clean = IncompleteRule::new(&cfg, None);
        assert_eq!(clean.max, Some(0));
        assert!(clean.allows(0) && !clean.allows(1));
        assert!(clean.rule.starts_with("because no fault is configured"), "{}", clean.rule);
        cfg.rus[1].faults = vec!["skip@500/4".into(), "bad-crc:0.01".into()];
        let faulty = IncompleteRule::new(&cfg, None);
        assert_eq!(faulty.max, None);
        assert!(faulty.allows(u64::MAX));
        assert_eq!(
            faulty.rule,
            "because faults are configured (rus[1].faults: skip@500/4, bad-crc:0.01); --max-incomplete N sets a limit"
        );
        for c in [&SystemConfig::default(), &cfg] {
            let given = IncompleteRule::new(c, Some(10));
            assert_eq!((given.max, given.rule.as_str()), (Some(10), "by --max-incomplete 10"));
            assert!(given.allows(10) && !given.allows(11));
        }
    }
}
