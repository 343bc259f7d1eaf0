//! A BU's raw file in orbit mode: each built "event" is an orbit, one orbit block per source,
//! written as CMSSW's DTH reader reads them (docs/formats.md §6): the blocks of each orbit of the
//! file one after another, no file header, no FRD record. Before an orbit is written the BU
//! checks that its sources agree, as that reader requires: the same run, orbit number and event
//! count in every orbit header, the same event ids in the same order in every block, no fragment
//! trailer flagging an error. The trigger source's block (source 1024) is the orbit's reference,
//! wherever it stands among the blocks (the first that can be walked when it cannot be); a block
//! that disagrees with it is left out of the orbit, counted and said, and the orbit is written with the others, as an event is written
//! without a FED that sent nothing. An orbit with no event is counted, never written.

use super::{BuFilesError, FragmentBytes};
use tessera_evb::types::FileId;
use tessera_evb::unit::BuiltEvent;
use tessera_formats::orbit::{BlockKey, OrbitBlock, agree};
use tessera_formats::tcds::TCDS_FED_ID;
use tessera_rundir::{OrbitCounts, RunDirectory};

/// Writes `events`, each an orbit, as orbit file `file`; returns what was left out, to say.
pub(super) fn write(
    dir: &RunDirectory,
    file: FileId,
    events: &[BuiltEvent],
    bytes: &impl FragmentBytes,
) -> Result<Vec<String>, BuFilesError> {
    let mut blocks: Vec<&[u8]> = Vec::new();
    let mut notes = Vec::new();
    let (mut event_count, mut written) = (0u32, 0u32);
    for orbit in events {
        let mut pieces = Vec::new();
        for fragment in orbit.parts.iter().flat_map(|p| &p.fragments) {
            let b =
                bytes.bytes(fragment).ok_or(BuFilesError::MissingBytes { event: orbit.event, fed: fragment.fed })?;
            crate::copies::written_by_bu(b);
            pieces.push((fragment.fed, b));
        }
        let checked = check_orbit(&pieces);
        notes.extend(checked.left_out.iter().map(|(source, why)| {
            format!(
                "orbit {} (index {}): source {source}'s block left out of the file: {why}",
                checked.orbit.unwrap_or_default(),
                orbit.event
            )
        }));
        if checked.written {
            event_count += u32::from(checked.events);
            written += 1;
            blocks.extend(checked.blocks);
        }
    }
    let counts = OrbitCounts { orbits: events.len() as u32, written };
    dir.write_orbit_file(file.lumi_section, file.index, &blocks, event_count, counts)?;
    Ok(notes)
}

/// One orbit, checked.
struct CheckedOrbit<'a> {
    /// The orbit number, if any block could be read.
    orbit: Option<u32>,
    /// Its events, as its reference block says.
    events: u16,
    /// Whether it goes into the file (it has events).
    written: bool,
    /// The blocks to write, in order.
    blocks: Vec<&'a [u8]>,
    /// The sources left out, and why.
    left_out: Vec<(u16, String)>,
}

/// Checks the blocks of one orbit against its reference, the trigger source's ([`agree`]).
fn check_orbit<'a>(pieces: &[(u16, &'a [u8])]) -> CheckedOrbit<'a> {
    let walked: Vec<Result<(OrbitBlock<'a>, Vec<u64>), String>> = pieces.iter().map(|&(_, b)| walk(b)).collect();
    let keys: Vec<Option<BlockKey<'_>>> = walked
        .iter()
        .map(|w| {
            let (block, ids) = w.as_ref().ok()?;
            let h = &block.header;
            Some(BlockKey { run: h.run, orbit: h.orbit, event_count: h.event_count, event_ids: ids })
        })
        .collect();
    let verdict = agree(&keys, pieces.iter().position(|&(source, _)| source == TCDS_FED_ID));
    let unreadable =
        walked.iter().zip(pieces).filter_map(|(w, &(source, _))| Some((source, w.as_ref().err()?.clone())));
    let disagreeing = verdict.left_out.iter().map(|&(i, d)| (pieces[i].0, d.to_string()));
    let blocks = verdict.kept.iter().filter_map(|&i| Some(walked[i].as_ref().ok()?.0.as_bytes())).collect();
    CheckedOrbit {
        orbit: verdict.orbit,
        events: verdict.events,
        written: verdict.is_written(),
        blocks,
        left_out: unreadable.chain(disagreeing).collect(),
    }
}

/// The block at the start of `bytes` and its event ids in walking order (last first), or why
/// it cannot be walked as CMSSW walks it.
fn walk(bytes: &[u8]) -> Result<(OrbitBlock<'_>, Vec<u64>), String> {
    let block = OrbitBlock::parse(bytes).map_err(|e| e.to_string())?;
    let mut ids = Vec::with_capacity(block.header.event_count.into());
    for fragment in block.fragments() {
        let fragment = fragment.map_err(|e| e.to_string())?;
        if fragment.flags() != 0 {
            return Err(format!(
                "event {}: its fragment trailer flags an error ({:#06x})",
                fragment.event_id(),
                fragment.flags()
            ));
        }
        ids.push(fragment.event_id());
    }
    Ok((block, ids))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_formats::orbit::{FragmentInfo, OrbitBlockWriter, orbit_fragment_len};

    fn block(source: u32, orbit: u32, ids: &[u64], flags: u16) -> Vec<u8> {
        let mut out = vec![0; 32 + ids.len() * orbit_fragment_len(32)];
        let mut w = OrbitBlockWriter::new(&mut out, source, 5, orbit).unwrap();
        for &id in ids {
            let info = FragmentInfo {
                event_id: id,
                bx: 1,
                l1a_types: 1,
                physics_type: 1,
                emulation_status: 0,
                status: 0,
                flags,
            };
            w.push_fragment(&info, &[7; 32]).unwrap();
        }
        w.finish().unwrap();
        out
    }

    #[test]
    fn blocks_that_disagree_with_the_trigger_block_are_left_out_and_said_the_others_kept_in_order() {
        let reference = block(1024, 9, &[10, 11, 12], 0);
        let good = block(3, 9, &[10, 11, 12], 0);
        let short = block(4, 9, &[10, 11], 0);
        let shifted = block(5, 9, &[10, 11, 13], 0);
        let other_orbit = block(6, 8, &[10, 11, 12], 0);
        let flagged = block(7, 9, &[10, 11, 12], 1);
        // The short block came first: the trigger source's block is the reference all the same.
        let pieces: Vec<(u16, &[u8])> = vec![
            (4, &short),
            (1024, &reference),
            (3, &good),
            (5, &shifted),
            (6, &other_orbit),
            (7, &flagged),
            (8, &[0x48; 40]),
        ];
        let c = check_orbit(&pieces);
        assert_eq!((c.orbit, c.events), (Some(9), 3));
        assert_eq!(c.blocks, vec![&reference[..], &good[..]]);
        let out: Vec<(u16, &str)> = c.left_out.iter().map(|(s, w)| (*s, w.as_str())).collect();
        assert_eq!(out.iter().map(|o| o.0).collect::<Vec<_>>(), vec![7, 8, 4, 5, 6]);
        assert!(out[0].1.contains("flags an error"), "{}", out[0].1);
        assert_eq!(out[2].1, "event count 2, where the orbit's reference block has 3");
        assert_eq!(out[3].1, "event id 13, where the orbit's reference block has 12");
        assert_eq!(out[4].1, "orbit 8, where the orbit's reference block has 9");
    }

    #[test]
    fn an_empty_orbit_has_no_events_and_nothing_unreadable_makes_no_orbit() {
        let empty = block(1024, 9, &[], 0);
        let other = block(3, 9, &[], 0);
        let c = check_orbit(&[(1024, &empty[..]), (3, &other[..])]);
        assert_eq!((c.events, c.blocks.len(), c.left_out.len()), (0, 2, 0));
        let c = check_orbit(&[(1024, &[1u8; 16][..])]);
        assert_eq!((c.orbit, c.blocks.len(), c.left_out.len()), (None, 0, 1));
    }
}
