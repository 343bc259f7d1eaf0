//! Names of the files in a BU run directory (docs/formats.md §7) and of the filter farm's outputs
//! (docs/formats.md §8).
//!
//! Writers zero-pad numbers to their minimum width and write wider values in full. Parsers accept
//! exactly what the writers produce and nothing else (no superfluous leading zeros, no missing
//! digits), so every valid name has one parse and one spelling: a directory scan can compare
//! names as strings.

use std::fmt;
use std::str::FromStr;

use crate::error::{FormatError, Result};

/// Directory where a BU writes files before it publishes them by rename.
pub const OPEN_DIR: &str = "open";
/// Directory of the `.jsd` definitions of the run's JSON documents.
pub const JSD_DIR: &str = "jsd";
/// Directory of the HLT menu and parameters (appears atomically).
pub const HLT_DIR: &str = "hlt";
/// Directory into which FUs claim raw files by rename (docs/formats.md §7 (a)).
pub const FU_DIR: &str = "fu";
/// File holding "next LS, next index" for FUs that claim files under an `fcntl` lock.
pub const FU_LOCK: &str = "fu.lock";
/// Definition of the per-raw-file index JSON.
pub const RAW_DATA_JSD: &str = "jsd/rawData.jsd";
/// Definition of the end-of-lumi-section JSON.
pub const EOLS_JSD: &str = "jsd/EoLS.jsd";
/// Definition of the end-of-run JSON.
pub const EOR_JSD: &str = "jsd/EoR.jsd";
/// Extension of a file being written before it is renamed into place (`<name>.<pid>.<n>.tmp`).
pub const TEMPORARY_EXT: &str = "tmp";

/// Whether `name` is a file being written, or left half-written by a writer that died: never a
/// file of the contract, whatever the name before its extension says.
pub fn is_temporary(name: &str) -> bool {
    name.rsplit_once('.').is_some_and(|(_, ext)| ext == TEMPORARY_EXT)
}

/// Parses a string of ASCII digits only: `str::parse` alone would also take a leading `+`.
pub(crate) fn decimal<T: FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// One zero-padded number in a name, with the problems reported when it is malformed. The
/// messages are `&'static str` because [`FormatError::Name`] holds one.
struct Num {
    prefix: &'static str,
    min_digits: usize,
    no_prefix: &'static str,
    not_digits: &'static str,
    too_short: &'static str,
    leading_zero: &'static str,
    too_large: &'static str,
}

macro_rules! num {
    ($label:literal, $prefix:literal, $min:literal) => {
        Num {
            prefix: $prefix,
            min_digits: $min,
            no_prefix: concat!($label, " must start with \"", $prefix, "\""),
            not_digits: concat!($label, " must be decimal digits"),
            too_short: concat!($label, " must have at least ", stringify!($min), " digits"),
            leading_zero: concat!($label, " has a superfluous leading zero"),
            too_large: concat!($label, " does not fit in 32 bits"),
        }
    };
}

const RUN: Num = num!("run number", "run", 6);
const LS: Num = num!("lumi section", "ls", 4);
const INDEX: Num = num!("file index", "index", 6);
const PID: Num = num!("pid", "pid", 5);
const CLAIM_PID: Num = Num { too_short: "pid must have at least 1 digit", ..num!("pid", "pid", 1) };

impl Num {
    /// Reads `part` (e.g. "ls0001") of the file name `name`.
    fn parse(&self, name: &str, part: &str) -> Result<u32> {
        let problem = |problem| Err(bad_name(name, problem));
        let Some(digits) = part.strip_prefix(self.prefix) else { return problem(self.no_prefix) };
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            return problem(self.not_digits);
        }
        if digits.len() < self.min_digits {
            return problem(self.too_short);
        }
        if digits.len() > self.min_digits.max(1) && digits.starts_with('0') {
            return problem(self.leading_zero);
        }
        digits.parse().or_else(|_| problem(self.too_large))
    }
}

fn bad_name(name: &str, problem: &'static str) -> FormatError {
    FormatError::Name { name: name.to_owned(), problem }
}

/// Name of a run directory: `run` and the run number, 6 digits at least.
pub fn run_dir_name(run: u32) -> String {
    format!("run{run:06}")
}

/// Reads the run number from a run directory name written by [`run_dir_name`].
pub fn parse_run_dir_name(name: &str) -> Result<u32> {
    RUN.parse(name, name)
}

/// A file a BU publishes in its run directory (docs/formats.md §7).
///
/// Lumi sections count from 1; lumi section 0 appears only in the end-of-run name. Indices
/// restart at 0 in each lumi section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BuFileName {
    /// `runRRRRRR_lsLLLL_indexIIIIII.raw`: a raw data file.
    Raw {
        /// Run number.
        run: u32,
        /// Lumi section.
        ls: u32,
        /// Index of the file within its lumi section.
        index: u32,
    },
    /// `runRRRRRR_lsLLLL_indexIIIIII.jsn`: the bookkeeping of the raw file of the same stem.
    IndexJson {
        /// Run number.
        run: u32,
        /// Lumi section.
        ls: u32,
        /// Index of the file within its lumi section.
        index: u32,
    },
    /// `runRRRRRR_lsLLLL_EoLS.jsn`: the lumi section is closed.
    EndOfLumi {
        /// Run number.
        run: u32,
        /// Lumi section.
        ls: u32,
    },
    /// `runRRRRRR_ls0000_EoR.jsn`: the run is over.
    EndOfRun {
        /// Run number.
        run: u32,
    },
}

impl BuFileName {
    /// The name without its extension: the common stem of a raw file and its index JSON.
    pub fn stem(&self) -> String {
        match *self {
            BuFileName::Raw { run, ls, index } | BuFileName::IndexJson { run, ls, index } => {
                format!("run{run:06}_ls{ls:04}_index{index:06}")
            }
            BuFileName::EndOfLumi { run, ls } => format!("run{run:06}_ls{ls:04}_EoLS"),
            BuFileName::EndOfRun { run } => format!("run{run:06}_ls0000_EoR"),
        }
    }

    /// The extension, without the dot: "raw" for raw files, "jsn" for every JSON.
    pub fn extension(&self) -> &'static str {
        match self {
            BuFileName::Raw { .. } => "raw",
            _ => "jsn",
        }
    }

    /// The run number.
    pub fn run(&self) -> u32 {
        match *self {
            BuFileName::Raw { run, .. }
            | BuFileName::IndexJson { run, .. }
            | BuFileName::EndOfLumi { run, .. }
            | BuFileName::EndOfRun { run } => run,
        }
    }

    /// The lumi section (0 for the end-of-run file).
    pub fn ls(&self) -> u32 {
        match *self {
            BuFileName::Raw { ls, .. } | BuFileName::IndexJson { ls, .. } | BuFileName::EndOfLumi { ls, .. } => ls,
            BuFileName::EndOfRun { .. } => 0,
        }
    }

    /// The index JSON that describes a raw file (itself for an index JSON; `None` for the
    /// end-of-lumi and end-of-run files, which describe no single file).
    pub fn index_json(&self) -> Option<BuFileName> {
        match *self {
            BuFileName::Raw { run, ls, index } | BuFileName::IndexJson { run, ls, index } => {
                Some(BuFileName::IndexJson { run, ls, index })
            }
            _ => None,
        }
    }

    /// The raw file an index JSON describes (itself for a raw file).
    pub fn raw(&self) -> Option<BuFileName> {
        match *self {
            BuFileName::Raw { run, ls, index } | BuFileName::IndexJson { run, ls, index } => {
                Some(BuFileName::Raw { run, ls, index })
            }
            _ => None,
        }
    }

    /// Parses a name written by `Display`.
    pub fn parse(name: &str) -> Result<BuFileName> {
        let mut parts = name.splitn(3, '_');
        let (Some(run), Some(ls), Some(tail)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad_name(name, "expected runRRRRRR_lsLLLL_<suffix>"));
        };
        let run = RUN.parse(name, run)?;
        let ls = LS.parse(name, ls)?;
        let in_lumi = |file| if ls == 0 { Err(bad_name(name, "lumi section 0 is reserved for EoR")) } else { Ok(file) };
        match tail {
            "EoLS.jsn" => in_lumi(BuFileName::EndOfLumi { run, ls }),
            "EoR.jsn" if ls == 0 => Ok(BuFileName::EndOfRun { run }),
            "EoR.jsn" => Err(bad_name(name, "end-of-run file must have lumi section 0000")),
            _ if tail.starts_with("index") => {
                let (index, ext) = tail.split_once('.').unwrap_or((tail, ""));
                let index = INDEX.parse(name, index)?;
                match ext {
                    "raw" => in_lumi(BuFileName::Raw { run, ls, index }),
                    "jsn" => in_lumi(BuFileName::IndexJson { run, ls, index }),
                    _ => Err(bad_name(name, "index file must end in .raw or .jsn")),
                }
            }
            _ => Err(bad_name(name, "unknown suffix")),
        }
    }
}

impl fmt::Display for BuFileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.stem(), self.extension())
    }
}

impl FromStr for BuFileName {
    type Err = FormatError;
    fn from_str(s: &str) -> Result<Self> {
        BuFileName::parse(s)
    }
}

/// Why `s` is not a stream name, if it is not one.
fn stream_problem(s: &str) -> Option<&'static str> {
    (s.is_empty() || !s.bytes().all(|b| b.is_ascii_alphanumeric()))
        .then_some("stream name must be non-empty ASCII alphanumeric")
}

/// Why `s` is not a producer or host token, if it is not one. Dots and dashes are allowed because
/// host names have them; `_` is not, because it separates the parts of a name.
fn token_problem(s: &str) -> Option<&'static str> {
    (s.is_empty() || !s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.'))
        .then_some("producer or host must be non-empty ASCII alphanumeric, '-' or '.'")
}

/// Checks a stream name: non-empty ASCII alphanumeric (so without `_`, which separates parts).
pub fn validate_stream_name(stream: &str) -> Result<()> {
    stream_problem(stream).map_or(Ok(()), |p| Err(bad_name(stream, p)))
}

/// Checks a named producer (a merger's host name, `StorageManager`) or a host name in a claimed
/// file: non-empty ASCII alphanumeric, `-` or `.`. A token `pid` + digits is taken for a
/// [`Producer::Pid`] by the parser, so do not name a producer that way.
pub fn validate_producer_name(producer: &str) -> Result<()> {
    token_problem(producer).map_or(Ok(()), |p| Err(bad_name(producer, p)))
}

/// Who wrote a filter-farm output file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Producer {
    /// An FU process: `pidPPPPP`, 5 digits at least.
    Pid(u32),
    /// An FU process's later outputs of a lumi section it has published before (it took over a
    /// dead process's input of that section): `pidPPPPPcK`, K ≥ 2, so that they never overwrite
    /// the first.
    PidPart {
        /// The process.
        pid: u32,
        /// Which of its commits of the lumi section, from 2.
        part: u32,
    },
    /// A merger: its host name, `StorageManager`, ... (see [`validate_producer_name`]).
    Named(String),
}

impl fmt::Display for Producer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Producer::Pid(pid) => write!(f, "pid{pid:05}"),
            Producer::PidPart { pid, part } => write!(f, "pid{pid:05}c{part}"),
            Producer::Named(name) => f.write_str(name),
        }
    }
}

impl Producer {
    /// FU process `pid`'s producer for its `part`-th commit of a lumi section (from 1).
    pub fn fu(pid: u32, part: u32) -> Producer {
        if part <= 1 { Producer::Pid(pid) } else { Producer::PidPart { pid, part } }
    }

    /// The FU process that wrote the file, if one did (not a merger).
    pub fn pid(&self) -> Option<u32> {
        match self {
            Producer::Pid(pid) | Producer::PidPart { pid, .. } => Some(*pid),
            Producer::Named(_) => None,
        }
    }

    /// Parses a producer token as a file name holds it: `pidPPPPP`, `pidPPPPPcK` (K ≥ 2), or a
    /// name.
    pub fn from_token(token: &str) -> Result<Producer> {
        Producer::parse(token, token)
    }

    /// Parses a producer token: `pidPPPPP`, `pidPPPPPcK` (K ≥ 2), or a name. `name` is the
    /// whole file name, for errors.
    fn parse(name: &str, producer: &str) -> Result<Producer> {
        let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
        let Some(rest) = producer.strip_prefix("pid") else { return Producer::named(name, producer) };
        match rest.split_once('c') {
            None if digits(rest) => Ok(Producer::Pid(PID.parse(name, producer)?)),
            Some((pid, part)) if digits(pid) && digits(part) => {
                let pid = PID.parse(name, &producer[..3 + pid.len()])?;
                match part.parse::<u32>() {
                    Ok(part) if part >= 2 => Ok(Producer::PidPart { pid, part }),
                    _ => Err(bad_name(name, "a process's later part must be numbered from 2 (pidPPPPPcK)")),
                }
            }
            _ => Producer::named(name, producer),
        }
    }

    fn named(name: &str, producer: &str) -> Result<Producer> {
        match token_problem(producer) {
            Some(p) => Err(bad_name(name, p)),
            None => Ok(Producer::Named(producer.to_owned())),
        }
    }
}

/// A filter-farm output: `runRRRRRR_lsLLLL_streamNAME_<producer>.<ext>` (docs/formats.md §8).
///
/// `Display` writes the fields as they are; [`StreamFileName::parse`] checks them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StreamFileName {
    /// Run number.
    pub run: u32,
    /// Lumi section (0 for per-run files such as stream headers).
    pub ls: u32,
    /// Stream name, without the `stream` prefix.
    pub stream: String,
    /// The FU process or merger that wrote the file.
    pub producer: Producer,
    /// Extension without the dot, e.g. "dat" or "jsn".
    pub ext: String,
}

impl StreamFileName {
    /// Parses a name written by `Display`. The extension is what follows the last `.`, so a
    /// named producer may contain dots (a fully qualified host name).
    pub fn parse(name: &str) -> Result<StreamFileName> {
        let Some((base, ext)) = name.rsplit_once('.') else { return Err(bad_name(name, "missing extension")) };
        if ext.is_empty() || !ext.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(bad_name(name, "extension must be non-empty ASCII alphanumeric"));
        }
        let parts: Vec<&str> = base.split('_').collect();
        let &[run, ls, stream, producer] = parts.as_slice() else {
            return Err(bad_name(
                name,
                if parts.len() < 4 {
                    "expected runRRRRRR_lsLLLL_streamNAME_<producer>.<ext>"
                } else {
                    "too many '_': stream names and producers may not contain '_'"
                },
            ));
        };
        let run = RUN.parse(name, run)?;
        let ls = LS.parse(name, ls)?;
        let Some(stream) = stream.strip_prefix("stream") else {
            return Err(bad_name(name, "stream part must start with \"stream\""));
        };
        if let Some(p) = stream_problem(stream) {
            return Err(bad_name(name, p));
        }
        let producer = Producer::parse(name, producer)?;
        Ok(StreamFileName { run, ls, stream: stream.to_owned(), producer, ext: ext.to_owned() })
    }
}

impl fmt::Display for StreamFileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let StreamFileName { run, ls, stream, producer, ext } = self;
        write!(f, "run{run:06}_ls{ls:04}_stream{stream}_{producer}.{ext}")
    }
}

impl FromStr for StreamFileName {
    type Err = FormatError;
    fn from_str(s: &str) -> Result<Self> {
        StreamFileName::parse(s)
    }
}

/// Content of `fu.lock` (docs/formats.md §7 (b)): the next file an FU should claim, written
/// "{ls} {index}".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FuLock {
    /// Lumi section of the next file.
    pub next_ls: u32,
    /// Index of the next file within that lumi section.
    pub next_index: u32,
}

impl Default for FuLock {
    /// "1 0": the first file of a run.
    fn default() -> Self {
        FuLock { next_ls: 1, next_index: 0 }
    }
}

impl FuLock {
    /// The raw file this lock points at in run `run`.
    pub fn raw_file(&self, run: u32) -> BuFileName {
        BuFileName::Raw { run, ls: self.next_ls, index: self.next_index }
    }

    /// Parses the file's content; one trailing newline is tolerated. Errors give the byte offset
    /// of the bad number within the content.
    pub fn parse(text: &str) -> Result<FuLock> {
        const WHAT: &str = "fu.lock";
        let body = text.strip_suffix('\n').unwrap_or(text);
        let Some((ls, index)) = body.split_once(' ') else {
            return Err(FormatError::bad(WHAT, "content", 0, "\"<next LS> <next index>\"", format!("{text:?}")));
        };
        let number = |field, offset, s: &str| {
            decimal(s)
                .ok_or_else(|| FormatError::bad(WHAT, field, offset, "an unsigned 32-bit decimal", format!("{s:?}")))
        };
        Ok(FuLock { next_ls: number("next LS", 0, ls)?, next_index: number("next index", ls.len() + 1, index)? })
    }
}

impl fmt::Display for FuLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.next_ls, self.next_index)
    }
}

/// A raw file claimed by an FU through an atomic rename (docs/formats.md §7 (a)):
/// `fu/runRRRRRR_lsLLLL_indexIIIIII_<host>_pid<pid>.raw`. The pid is written unpadded.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClaimedRawName {
    /// Run number.
    pub run: u32,
    /// Lumi section.
    pub ls: u32,
    /// Index of the file within its lumi section.
    pub index: u32,
    /// Host of the claiming FU (see [`validate_producer_name`]).
    pub host: String,
    /// Process id of the claiming FU.
    pub pid: u32,
}

impl ClaimedRawName {
    /// The raw file as the BU published it.
    pub fn raw(&self) -> BuFileName {
        BuFileName::Raw { run: self.run, ls: self.ls, index: self.index }
    }

    /// Path relative to the run directory: `fu/` and the file name.
    pub fn path(&self) -> String {
        format!("{FU_DIR}/{self}")
    }

    /// Parses a file name written by `Display`, or a path written by [`ClaimedRawName::path`].
    pub fn parse(name: &str) -> Result<ClaimedRawName> {
        let file = name.strip_prefix("fu/").unwrap_or(name);
        let Some(base) = file.strip_suffix(".raw") else {
            return Err(bad_name(name, "claimed file must end in .raw"));
        };
        let parts: Vec<&str> = base.split('_').collect();
        let &[run, ls, index, host, pid] = parts.as_slice() else {
            return Err(bad_name(name, "expected runRRRRRR_lsLLLL_indexIIIIII_<host>_pid<pid>.raw"));
        };
        let (run, ls, index) = (RUN.parse(name, run)?, LS.parse(name, ls)?, INDEX.parse(name, index)?);
        if let Some(p) = token_problem(host) {
            return Err(bad_name(name, p));
        }
        Ok(ClaimedRawName { run, ls, index, host: host.to_owned(), pid: CLAIM_PID.parse(name, pid)? })
    }
}

impl fmt::Display for ClaimedRawName {
    /// The file name inside `fu/`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}_pid{}.raw", self.raw().stem(), self.host, self.pid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn problem(r: Result<impl fmt::Debug>) -> &'static str {
        match r {
            Err(FormatError::Name { problem, .. }) => problem,
            other => panic!("expected a name error, got {other:?}"),
        }
    }

    #[test]
    fn run_dir() {
        assert_eq!(run_dir_name(123456), "run123456");
        assert_eq!(run_dir_name(42), "run000042");
        assert_eq!(run_dir_name(1234567), "run1234567");
        assert_eq!(parse_run_dir_name("run000042").unwrap(), 42);
        assert_eq!(parse_run_dir_name("run1234567").unwrap(), 1234567);
        assert_eq!(problem(parse_run_dir_name("run42")), "run number must have at least 6 digits");
        assert_eq!(problem(parse_run_dir_name("run0000042")), "run number has a superfluous leading zero");
        assert_eq!(problem(parse_run_dir_name("Run000042")), "run number must start with \"run\"");
        assert_eq!(problem(parse_run_dir_name("run99999999999")), "run number does not fit in 32 bits");
    }

    #[test]
    fn bu_names_are_written_exactly() {
        let cases = [
            (BuFileName::Raw { run: 123456, ls: 1, index: 0 }, "run123456_ls0001_index000000.raw"),
            (BuFileName::IndexJson { run: 7, ls: 23, index: 45 }, "run000007_ls0023_index000045.jsn"),
            (BuFileName::EndOfLumi { run: 7, ls: 12345 }, "run000007_ls12345_EoLS.jsn"),
            (BuFileName::EndOfRun { run: 7 }, "run000007_ls0000_EoR.jsn"),
            (BuFileName::Raw { run: 1, ls: 2, index: 1234567 }, "run000001_ls0002_index1234567.raw"),
        ];
        for (file, name) in cases {
            assert_eq!(file.to_string(), name);
            assert_eq!(BuFileName::parse(name).unwrap(), file);
            assert_eq!(name.parse::<BuFileName>().unwrap(), file);
        }
    }

    #[test]
    fn raw_and_json_pair() {
        let raw = BuFileName::Raw { run: 1, ls: 2, index: 3 };
        let json = raw.index_json().unwrap();
        assert_eq!(json.to_string(), "run000001_ls0002_index000003.jsn");
        assert_eq!(raw.stem(), json.stem());
        assert_eq!(json.raw(), Some(raw));
        assert_eq!(BuFileName::EndOfRun { run: 1 }.index_json(), None);
        assert_eq!((raw.run(), raw.ls(), BuFileName::EndOfRun { run: 9 }.ls()), (1, 2, 0));
    }

    #[test]
    fn bu_names_rejected() {
        let cases = [
            ("run000001_ls001_index000000.raw", "lumi section must have at least 4 digits"),
            ("run000001_ls0001_index000000.dat", "index file must end in .raw or .jsn"),
            ("run000001_ls0001_index000000", "index file must end in .raw or .jsn"),
            ("run000001_ls0001_index00000.raw", "file index must have at least 6 digits"),
            ("run000001_ls0001_index0000x0.raw", "file index must be decimal digits"),
            ("run000001_ls0001_EoR.jsn", "end-of-run file must have lumi section 0000"),
            ("run000001_ls0000_EoLS.jsn", "lumi section 0 is reserved for EoR"),
            ("run000001_ls0000_index000000.raw", "lumi section 0 is reserved for EoR"),
            ("run000001_ls0001_EoLS.json", "unknown suffix"),
            ("run000001_ls0001", "expected runRRRRRR_lsLLLL_<suffix>"),
            ("run00001_ls0001_EoLS.jsn", "run number must have at least 6 digits"),
            ("run000001_LS0001_EoLS.jsn", "lumi section must start with \"ls\""),
            ("run000001_ls+001_EoLS.jsn", "lumi section must be decimal digits"),
            ("", "expected runRRRRRR_lsLLLL_<suffix>"),
        ];
        for (name, expected) in cases {
            assert_eq!(problem(BuFileName::parse(name)), expected, "{name}");
        }
        let err = BuFileName::parse("run1_ls0001_EoLS.jsn").unwrap_err();
        assert_eq!(err.to_string(), "file name \"run1_ls0001_EoLS.jsn\": run number must have at least 6 digits");
    }

    #[test]
    fn stream_names() {
        let fu = StreamFileName {
            run: 123456,
            ls: 3,
            stream: "PhysicsA".into(),
            producer: Producer::Pid(4321),
            ext: "dat".into(),
        };
        assert_eq!(fu.to_string(), "run123456_ls0003_streamPhysicsA_pid04321.dat");
        assert_eq!(StreamFileName::parse(&fu.to_string()).unwrap(), fu);
        let merged =
            StreamFileName { producer: Producer::Named("StorageManager".into()), ext: "jsn".into(), ..fu.clone() };
        assert_eq!(merged.to_string(), "run123456_ls0003_streamPhysicsA_StorageManager.jsn");
        assert_eq!(merged.to_string().parse::<StreamFileName>().unwrap(), merged);
        let host = StreamFileName::parse("run000001_ls0001_streamA_bu-c2e18-01.cms.dat").unwrap();
        assert_eq!((host.producer, host.ext.as_str()), (Producer::Named("bu-c2e18-01.cms".into()), "dat"));
        assert_eq!(
            StreamFileName::parse("run000001_ls0001_streamA_pid1234567.dat").unwrap().producer,
            Producer::Pid(1234567)
        );
        let later = StreamFileName { producer: Producer::fu(4321, 2), ..fu.clone() };
        assert_eq!(later.to_string(), "run123456_ls0003_streamPhysicsA_pid04321c2.dat");
        assert_eq!(StreamFileName::parse(&later.to_string()).unwrap(), later);
        assert_eq!((Producer::fu(4321, 1), later.producer.pid()), (Producer::Pid(4321), Some(4321)));
    }

    #[test]
    fn stream_names_rejected() {
        let cases = [
            ("run000001_ls0001_streamA_pid00001", "missing extension"),
            ("run000001_ls0001_streamA_pid00001.", "extension must be non-empty ASCII alphanumeric"),
            ("run000001_ls0001_streamA_B_pid00001.dat", "too many '_': stream names and producers may not contain '_'"),
            ("run000001_ls0001_pid00001.dat", "expected runRRRRRR_lsLLLL_streamNAME_<producer>.<ext>"),
            ("run000001_ls0001_strA_pid00001.dat", "stream part must start with \"stream\""),
            ("run000001_ls0001_stream_pid00001.dat", "stream name must be non-empty ASCII alphanumeric"),
            ("run000001_ls0001_stream-A_pid00001.dat", "stream name must be non-empty ASCII alphanumeric"),
            ("run000001_ls0001_streamA_pid123.dat", "pid must have at least 5 digits"),
            ("run000001_ls0001_streamA_pid00123c1.dat", "a process's later part must be numbered from 2 (pidPPPPPcK)"),
            ("run000001_ls0001_streamA_pid012345.dat", "pid has a superfluous leading zero"),
            ("run000001_ls0001_streamA_.dat", "producer or host must be non-empty ASCII alphanumeric, '-' or '.'"),
            ("run000001_ls0001_streamA_h/x.dat", "producer or host must be non-empty ASCII alphanumeric, '-' or '.'"),
        ];
        for (name, expected) in cases {
            assert_eq!(problem(StreamFileName::parse(name)), expected, "{name}");
        }
        assert!(validate_stream_name("PhysicsA1").is_ok());
        for bad in ["", "A_B", "A-B", "Å"] {
            assert_eq!(problem(validate_stream_name(bad)), "stream name must be non-empty ASCII alphanumeric");
        }
        assert!(validate_producer_name("fu-c2f11-13-02.cms").is_ok());
        assert!(validate_producer_name("a_b").is_err());
    }

    #[test]
    fn fu_lock() {
        assert_eq!(FuLock::default().to_string(), "1 0");
        assert_eq!(FuLock::parse("1 0").unwrap(), FuLock::default());
        assert_eq!(FuLock::parse("12 345\n").unwrap(), FuLock { next_ls: 12, next_index: 345 });
        assert_eq!(FuLock { next_ls: 3, next_index: 4 }.raw_file(5).to_string(), "run000005_ls0003_index000004.raw");
        let err = FuLock::parse("12 x5").unwrap_err();
        assert_eq!(
            err.to_string(),
            "fu.lock: bad next index at byte 3: expected an unsigned 32-bit decimal, found \"x5\""
        );
        assert_eq!(err.offset(), Some(3));
        for bad in ["", "1", "1  0", " 1 0", "1 0\n\n", "-1 0", "1 4294967296", "1\t0", "1 0 2"] {
            assert!(FuLock::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn claimed_names() {
        let c = ClaimedRawName { run: 1, ls: 2, index: 3, host: "fu-c2f11-13-02".into(), pid: 777 };
        assert_eq!(c.to_string(), "run000001_ls0002_index000003_fu-c2f11-13-02_pid777.raw");
        assert_eq!(c.path(), "fu/run000001_ls0002_index000003_fu-c2f11-13-02_pid777.raw");
        assert_eq!(ClaimedRawName::parse(&c.to_string()).unwrap(), c);
        assert_eq!(ClaimedRawName::parse(&c.path()).unwrap(), c);
        assert_eq!(c.raw(), BuFileName::Raw { run: 1, ls: 2, index: 3 });
        let cases = [
            ("run000001_ls0002_index000003_host_pid7.jsn", "claimed file must end in .raw"),
            ("run000001_ls0002_index000003_pid7.raw", "expected runRRRRRR_lsLLLL_indexIIIIII_<host>_pid<pid>.raw"),
            ("run000001_ls0002_index000003_host_7.raw", "pid must start with \"pid\""),
            ("run000001_ls0002_index000003_host_pid07.raw", "pid has a superfluous leading zero"),
            ("run000001_ls0002_index000003_host_pid.raw", "pid must have at least 1 digit"),
            (
                "run000001_ls0002_index000003_h*st_pid7.raw",
                "producer or host must be non-empty ASCII alphanumeric, '-' or '.'",
            ),
        ];
        for (name, expected) in cases {
            assert_eq!(problem(ClaimedRawName::parse(name)), expected, "{name}");
        }
    }

    fn bu_name() -> impl Strategy<Value = BuFileName> {
        prop_oneof![
            (any::<u32>(), 1..=u32::MAX, any::<u32>()).prop_map(|(run, ls, index)| BuFileName::Raw { run, ls, index }),
            (any::<u32>(), 1..=u32::MAX, any::<u32>()).prop_map(|(run, ls, index)| BuFileName::IndexJson {
                run,
                ls,
                index
            }),
            (any::<u32>(), 1..=u32::MAX).prop_map(|(run, ls)| BuFileName::EndOfLumi { run, ls }),
            any::<u32>().prop_map(|run| BuFileName::EndOfRun { run }),
        ]
    }

    fn producer() -> impl Strategy<Value = Producer> {
        prop_oneof![
            any::<u32>().prop_map(Producer::Pid),
            (any::<u32>(), 2..u32::MAX).prop_map(|(pid, part)| Producer::PidPart { pid, part }),
            "[A-Za-oq-z][A-Za-z0-9.-]{0,20}".prop_map(Producer::Named)
        ]
    }

    proptest! {
        #[test]
        fn bu_names_round_trip(file in bu_name()) {
            prop_assert_eq!(BuFileName::parse(&file.to_string())?, file);
        }

        #[test]
        fn stream_names_round_trip(
            run in any::<u32>(), ls in any::<u32>(), stream in "[A-Za-z0-9]{1,12}",
            producer in producer(), ext in "[a-z0-9]{1,5}",
        ) {
            let name = StreamFileName { run, ls, stream, producer, ext };
            prop_assert_eq!(StreamFileName::parse(&name.to_string())?, name);
        }

        #[test]
        fn claimed_names_round_trip(run in any::<u32>(), ls in any::<u32>(), index in any::<u32>(),
                                    host in "[A-Za-z0-9.-]{1,20}", pid in any::<u32>()) {
            let c = ClaimedRawName { run, ls, index, host, pid };
            prop_assert_eq!(ClaimedRawName::parse(&c.path())?, c);
        }

        #[test]
        fn fu_lock_round_trips(next_ls in any::<u32>(), next_index in any::<u32>()) {
            let lock = FuLock { next_ls, next_index };
            prop_assert_eq!(FuLock::parse(&lock.to_string())?, lock);
        }

        #[test]
        fn parsers_never_panic(s in "\\PC{0,40}", t in "(run[0-9]{0,8}_ls[0-9]{0,5}_)?[A-Za-z0-9_.-]{0,24}") {
            for s in [&s, &t] {
                let _ = parse_run_dir_name(s);
                let _ = BuFileName::parse(s);
                let _ = StreamFileName::parse(s);
                let _ = ClaimedRawName::parse(s);
                let _ = FuLock::parse(s);
            }
        }
    }
}
