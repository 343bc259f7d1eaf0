//! FED lists as people write them on the command line and in the system file: `1024,0-3`.

use std::fmt::Write as _;
use tessera_formats::fed::MAX_FED_ID;

/// Why a FED list cannot be read. The message names the offending item, not the whole list:
/// callers prefix it with where the list came from (`--feds 0-5000: ...`, `rus[1].feds: ...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FedListError {
    /// An item that is not a decimal number.
    #[error("{item:?}: expected a FED id (0 to 4095) or a range such as 0-7")]
    NotANumber {
        /// The item as written.
        item: String,
    },
    /// A number above 4095 (FED ids have 12 bits).
    #[error("FED id {id} is above 4095")]
    AboveMax {
        /// The number as read.
        id: u32,
    },
    /// A range whose first id is above its last.
    #[error("range {range} runs backwards")]
    Backwards {
        /// The range as written.
        range: String,
    },
    /// An id that appears twice, alone or inside ranges.
    #[error("FED {fed} is listed twice")]
    Twice {
        /// The id.
        fed: u16,
    },
}

/// Parses a FED list: comma-separated ids and inclusive ranges (`0-7,1024`), each id at most
/// 4095 and none twice. Whitespace around ids is allowed. The ids come back in the order written.
pub fn parse_fed_list(list: &str) -> Result<Vec<u16>, FedListError> {
    let number = |s: &str| -> Result<u16, FedListError> {
        let n: u32 = s.trim().parse().map_err(|_| FedListError::NotANumber { item: s.to_owned() })?;
        u16::try_from(n).ok().filter(|&n| n <= MAX_FED_ID).ok_or(FedListError::AboveMax { id: n })
    };
    // One flag per possible id: a list may hold all 4096, so `Vec::contains` would be quadratic.
    let mut seen = vec![false; usize::from(MAX_FED_ID) + 1];
    let mut feds = Vec::new();
    for item in list.split(',') {
        // A part that is not a number is reported with its whole item ("0-", not "").
        let whole = |e| match e {
            FedListError::NotANumber { .. } => FedListError::NotANumber { item: item.trim().to_owned() },
            e => e,
        };
        let (lo, hi) = match item.split_once('-') {
            Some((lo, hi)) => (number(lo).map_err(whole)?, number(hi).map_err(whole)?),
            None => (number(item).map_err(whole)?, number(item).map_err(whole)?),
        };
        if lo > hi {
            return Err(FedListError::Backwards { range: item.trim().to_owned() });
        }
        for fed in lo..=hi {
            if std::mem::replace(&mut seen[usize::from(fed)], true) {
                return Err(FedListError::Twice { fed });
            }
            feds.push(fed);
        }
    }
    Ok(feds)
}

/// Writes `feds` in the syntax [`parse_fed_list`] reads, in the same order, folding runs of
/// consecutive ascending ids into ranges: `[1024, 0, 1, 2, 3]` gives `1024,0-3`.
pub fn format_fed_list(feds: &[u16]) -> String {
    let mut out = String::new();
    let mut rest = feds;
    while let Some((&first, tail)) = rest.split_first() {
        let run = tail.iter().zip(1u16..).take_while(|&(&fed, step)| first.checked_add(step) == Some(fed)).count();
        if !out.is_empty() {
            out.push(',');
        }
        // Writing into a String cannot fail.
        let _ = match run {
            0 => write!(out, "{first}"),
            _ => write!(out, "{first}-{}", tail[run - 1]),
        };
        rest = &tail[run..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ids_and_ranges_in_order() {
        assert_eq!(parse_fed_list("1024,0-3").unwrap(), [1024, 0, 1, 2, 3]);
        assert_eq!(parse_fed_list(" 7 , 5-5").unwrap(), [7, 5]);
        assert_eq!(parse_fed_list("0-4095").unwrap().len(), 4096);
    }

    #[test]
    fn errors_name_the_item() {
        let msg = |s: &str| parse_fed_list(s).unwrap_err().to_string();
        assert_eq!(msg("0-5000"), "FED id 5000 is above 4095");
        assert_eq!(msg("7-3"), "range 7-3 runs backwards");
        assert_eq!(msg("1,x"), "\"x\": expected a FED id (0 to 4095) or a range such as 0-7");
        assert_eq!(msg(""), "\"\": expected a FED id (0 to 4095) or a range such as 0-7");
        assert_eq!(msg("1024,0-"), "\"0-\": expected a FED id (0 to 4095) or a range such as 0-7");
        assert_eq!(msg("0-3,2"), "FED 2 is listed twice");
    }

    #[test]
    fn formats_back_to_the_same_list() {
        for list in ["1024,0-3", "4-7", "5", "3,2,1", "0-1,3-4095", "4095,0"] {
            let feds = parse_fed_list(list).unwrap();
            assert_eq!(format_fed_list(&feds), list);
        }
        assert_eq!(format_fed_list(&[]), "");
    }
}
