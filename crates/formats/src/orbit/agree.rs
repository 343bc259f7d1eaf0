//! Whether the blocks of one orbit agree, as CMSSW's DTH reader needs them to (docs/formats.md
//! §6): the same run, orbit number and event count in every orbit header, and the same event ids
//! in the same order in every block. The rule is kept apart from the bytes so that the BU that
//! writes orbit files and the simulator that checks the BU's choices under faults apply one rule:
//! the trigger source's block is the orbit's reference (the first readable block when it cannot
//! be read), and a block that differs from it is left out of the orbit. The reference is chosen
//! by source, never by place: blocks arrive in any order, and a data source's short block must
//! not become the measure of the others.

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
#[error("{field} {theirs}, where the orbit's reference block has {ours}")]
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
/// block that could not be read (its caller says why). The block at `trigger` (the trigger
/// source's, where the orbit has one) is the reference when it can be read; otherwise the first
/// readable block is.
pub fn agree(blocks: &[Option<BlockKey<'_>>], trigger: Option<usize>) -> OrbitAgreement {
    let mut verdict = OrbitAgreement { orbit: None, events: 0, kept: Vec::new(), left_out: Vec::new() };
    let readable_trigger = trigger.filter(|&i| blocks.get(i).is_some_and(Option::is_some));
    let Some(at) = readable_trigger.or_else(|| blocks.iter().position(Option::is_some)) else { return verdict };
    let reference = blocks[at].expect("chosen among the readable blocks");
    verdict.orbit = Some(reference.orbit);
    verdict.events = reference.event_count;
    for (i, block) in blocks.iter().enumerate() {
        let Some(block) = block else { continue };
        match disagreement(&reference, block) {
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
    fn without_a_trigger_block_the_first_readable_one_is_the_reference() {
        let (a, short, shifted) = ([12, 11, 10], [12, 11], [13, 11, 10]);
        let other_run = BlockKey { run: 6, ..key(9, &a) };
        let blocks = [
            None,
            Some(key(9, &a)),
            Some(key(9, &a)),
            Some(key(9, &short)),
            Some(key(9, &shifted)),
            Some(key(8, &a)),
            Some(other_run),
        ];
        // A trigger index that names an unreadable block, or none at all, falls back alike.
        assert_eq!(agree(&blocks, Some(0)), agree(&blocks, None));
        let v = agree(&blocks, None);
        assert_eq!((v.orbit, v.events, v.kept.clone()), (Some(9), 3, vec![1, 2]));
        let said: Vec<(usize, String)> = v.left_out.iter().map(|(i, d)| (*i, d.to_string())).collect();
        assert_eq!(
            said,
            vec![
                (3, "event count 2, where the orbit's reference block has 3".to_string()),
                (4, "event id 13, where the orbit's reference block has 12".to_string()),
                (5, "orbit 8, where the orbit's reference block has 9".to_string()),
                (6, "run 6, where the orbit's reference block has 5".to_string()),
            ]
        );
    }

    #[test]
    fn the_trigger_block_is_the_reference_wherever_it_stands() {
        // A data source's short block arrived first; the trigger's block still rules.
        let (full, short) = ([12, 11, 10], [12, 11]);
        let blocks = [Some(key(9, &short)), Some(key(9, &full)), Some(key(9, &full))];
        let v = agree(&blocks, Some(2));
        assert_eq!((v.events, v.kept.clone()), (3, vec![1, 2]));
        assert_eq!(v.left_out.iter().map(|&(i, d)| (i, d.field)).collect::<Vec<_>>(), vec![(0, "event count")]);
        // Placed by position instead, the short block would have thrown out both full ones.
        assert_eq!(agree(&blocks, None).kept, vec![0]);
    }

    #[test]
    fn no_readable_block_makes_no_orbit() {
        let v = agree(&[None, None], Some(1));
        assert_eq!(v, OrbitAgreement { orbit: None, events: 0, kept: vec![], left_out: vec![] });
    }
}
