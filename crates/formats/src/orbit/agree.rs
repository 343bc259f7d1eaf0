//! Whether the blocks of one orbit agree, as CMSSW's DTH reader needs them to (docs/formats.md
//! §6): the same run, orbit number and event count in every orbit header, and the same event ids
//! in the same order in every block. The rule is kept apart from the bytes so that the BU that
//! writes orbit files and the simulator that checks the BU's choices under faults apply one rule:
//! the first readable block is the orbit's reference, and a block that differs from it is left
//! out of the orbit.

/// What of one source's block of an orbit must agree with the orbit's other blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockKey<'a> {
    /// The orbit header's run.
    pub run: u32,
    /// The orbit header's orbit number.
    pub orbit: u32,
    /// The orbit header's event count.
    pub event_count: u16,
    /// The event ids of the block's fragments, in walking order (last first).
    pub event_ids: &'a [u64],
}

/// How a block differs from its orbit's reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{field} {theirs}, where the orbit's first block has {ours}")]
pub struct Disagreement {
    /// The first field that differs: `run`, `orbit`, `event count` or `event id`.
    pub field: &'static str,
    /// The block's value.
    pub theirs: u64,
    /// The reference's value.
    pub ours: u64,
}

/// The verdict on the blocks of one orbit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrbitAgreement {
    /// The reference's orbit number, `None` when no block could be read.
    pub orbit: Option<u32>,
    /// The reference's event count: the orbit's events.
    pub events: u16,
    /// The blocks to write, as indices into the input, in input order.
    pub kept: Vec<usize>,
    /// The readable blocks left out, with how they differ from the reference.
    pub left_out: Vec<(usize, Disagreement)>,
}

impl OrbitAgreement {
    /// Whether the orbit goes into the file: only with events, because CMSSW's reader delivers a
    /// spurious event after an empty block and fails on one at the end of a file. An empty orbit
    /// is counted instead.
    pub fn is_written(&self) -> bool {
        self.events > 0
    }
}

/// Judges the blocks of one orbit, in the order they are to be written: `None` stands for a
/// block that could not be read (its caller says why); the first readable block is the
/// reference.
pub fn agree<'a>(blocks: impl IntoIterator<Item = Option<BlockKey<'a>>>) -> OrbitAgreement {
    let mut verdict = OrbitAgreement { orbit: None, events: 0, kept: Vec::new(), left_out: Vec::new() };
    let mut reference: Option<BlockKey<'a>> = None;
    for (i, block) in blocks.into_iter().enumerate() {
        let Some(block) = block else { continue };
        let Some(first) = reference else {
            reference = Some(block);
            verdict.orbit = Some(block.orbit);
            verdict.events = block.event_count;
            verdict.kept.push(i);
            continue;
        };
        match disagreement(&first, &block) {
            None => verdict.kept.push(i),
            Some(d) => verdict.left_out.push((i, d)),
        }
    }
    verdict
}

/// The first field in which `block` differs from `reference`, if any.
fn disagreement(reference: &BlockKey<'_>, block: &BlockKey<'_>) -> Option<Disagreement> {
    let differs = |field, theirs: u64, ours: u64| (theirs != ours).then_some(Disagreement { field, theirs, ours });
    differs("run", block.run.into(), reference.run.into())
        .or_else(|| differs("orbit", block.orbit.into(), reference.orbit.into()))
        .or_else(|| differs("event count", block.event_count.into(), reference.event_count.into()))
        .or_else(|| {
            let at = block.event_ids.iter().zip(reference.event_ids).position(|(a, b)| a != b)?;
            differs("event id", block.event_ids[at], reference.event_ids[at])
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(orbit: u32, ids: &[u64]) -> BlockKey<'_> {
        BlockKey { run: 5, orbit, event_count: ids.len() as u16, event_ids: ids }
    }

    #[test]
    fn the_first_readable_block_is_the_reference_and_each_other_is_judged_against_it() {
        let (a, short, shifted) = ([12, 11, 10], [12, 11], [13, 11, 10]);
        let other_run = BlockKey { run: 6, ..key(9, &a) };
        let v = agree(
            [None, Some(key(9, &a)), Some(key(9, &a)), Some(key(9, &short)), Some(key(9, &shifted))]
                .into_iter()
                .chain([Some(key(8, &a)), Some(other_run)]),
        );
        assert_eq!((v.orbit, v.events, v.kept.clone()), (Some(9), 3, vec![1, 2]));
        let said: Vec<(usize, String)> = v.left_out.iter().map(|(i, d)| (*i, d.to_string())).collect();
        assert_eq!(
            said,
            vec![
                (3, "event count 2, where the orbit's first block has 3".to_string()),
                (4, "event id 13, where the orbit's first block has 12".to_string()),
                (5, "orbit 8, where the orbit's first block has 9".to_string()),
                (6, "run 6, where the orbit's first block has 5".to_string()),
            ]
        );
    }

    #[test]
    fn no_readable_block_makes_no_orbit() {
        let v = agree([None, None]);
        assert_eq!(v, OrbitAgreement { orbit: None, events: 0, kept: vec![], left_out: vec![] });
    }
}
