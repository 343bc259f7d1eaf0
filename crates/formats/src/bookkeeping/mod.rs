//! Bookkeeping JSON of the BU directory and of the filter farm (docs/formats.md §7–§8): the `.jsd`
//! definitions, the documents they describe, their merging, and the Adler-32 checksum that merged
//! outputs carry.
//!
//! A document is `{"data":[...],"definition":"<path to .jsd>","source":"<producer>"}`. Its values
//! are strings, as CMS writes them; their meaning and merge operation come from the legend of the
//! `.jsd`, by position. [`JsonDoc`] is that untyped form, which mergers work on; [`IndexDoc`],
//! [`EolsDoc`], [`EorDoc`] and [`FuOutputDoc`] are the typed forms that writers and checkers use.

use std::fmt;

use serde::{Serialize, Serializer};
use serde_json::{Map, Value as Json};

use crate::error::{FormatError, Result};
use crate::names::decimal;

/// Declares an enum whose values have fixed names in JSON, with the conversions both ways.
macro_rules! json_names {
    ($(#[$meta:meta])* $ty:ident { $($(#[$vmeta:meta])* $variant:ident = $name:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $ty {
            $($(#[$vmeta])* $variant,)+
        }

        impl $ty {
            /// Every value, in declaration order.
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            /// The name a `.jsd` uses.
            pub fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)+
                }
            }

            /// The value a `.jsd` name stands for.
            pub fn from_name(name: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.name() == name)
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }
    };
}

json_names! {
    /// How a field combines when documents are merged (docs/formats.md §8).
    MergeOp {
        /// Unsigned sum.
        Sum = "sum",
        /// Bitwise OR of unsigned integers.
        BinaryOr = "binaryOr",
        /// One value kept; differing values give "N/A".
        Same = "same",
        /// Non-empty values joined with ",".
        Cat = "cat",
        /// A file list, rewritten to the merged file's name.
        Merge = "merge",
        /// Adler-32 of the concatenated files, combined from the inputs' checksums.
        Adler32 = "adler32",
    }
}

json_names! {
    /// The type a `.jsd` declares for a field. Informative only: merging follows the operation.
    FieldType {
        /// A decimal integer (still written as a JSON string).
        Integer = "integer",
        /// Free text.
        String = "string",
    }
}

/// One field of a legend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LegendField {
    /// Field name, e.g. "NEvents".
    pub name: String,
    /// How the field merges.
    pub operation: MergeOp,
    /// Declared type.
    #[serde(rename = "type")]
    pub field_type: FieldType,
}

/// A `.jsd` definition: the names, merge operations and types of a document's values, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Legend {
    /// The fields, in the order of the documents' `data` values.
    #[serde(rename = "legend")]
    pub fields: Vec<LegendField>,
}

/// A field of a standard legend: name, operation, type.
type Spec = (&'static str, MergeOp, FieldType);

const fn int(name: &'static str, op: MergeOp) -> Spec {
    (name, op, FieldType::Integer)
}

const fn text(name: &'static str, op: MergeOp) -> Spec {
    (name, op, FieldType::String)
}

const RAW_DATA: &[Spec] = &[int("NEvents", MergeOp::Sum), int("NBytes", MergeOp::Sum)];

/// An orbit file's: the orbits written in it follow (docs/formats.md §7).
const RAW_DATA_ORBITS: &[Spec] =
    &[int("NEvents", MergeOp::Sum), int("NBytes", MergeOp::Sum), int("NOrbits", MergeOp::Sum)];

const EOLS: &[Spec] = &[
    int("NEvents", MergeOp::Sum),
    int("NFiles", MergeOp::Sum),
    int("TotalEvents", MergeOp::Sum),
    int("NLostEvents", MergeOp::Sum),
    int("NBytes", MergeOp::Sum),
];

/// Orbit mode: the orbits of the lumi section given to the BU, and those of them with no event.
const EOLS_ORBITS: &[Spec] = &[
    int("NEvents", MergeOp::Sum),
    int("NFiles", MergeOp::Sum),
    int("TotalEvents", MergeOp::Sum),
    int("NLostEvents", MergeOp::Sum),
    int("NBytes", MergeOp::Sum),
    int("NOrbits", MergeOp::Sum),
    int("NEmptyOrbits", MergeOp::Sum),
];

/// NLumis and LastLumi describe the run, which every BU sees whole: merging the BUs' EoR
/// documents keeps the one value (`same`), and a disagreement shows as "N/A" rather than as a
/// sum that means nothing.
const EOR: &[Spec] = &[
    int("NEvents", MergeOp::Sum),
    int("NFiles", MergeOp::Sum),
    int("NLumis", MergeOp::Same),
    int("LastLumi", MergeOp::Same),
];

const EOR_ORBITS: &[Spec] = &[
    int("NEvents", MergeOp::Sum),
    int("NFiles", MergeOp::Sum),
    int("NLumis", MergeOp::Same),
    int("LastLumi", MergeOp::Same),
    int("NOrbits", MergeOp::Sum),
    int("NEmptyOrbits", MergeOp::Sum),
];

const FU_OUTPUT: &[Spec] = &[
    int("Processed", MergeOp::Sum),
    int("Accepted", MergeOp::Sum),
    int("ErrorEvents", MergeOp::Sum),
    int("ReturnCodeMask", MergeOp::BinaryOr),
    text("Filelist", MergeOp::Merge),
    int("Filesize", MergeOp::Sum),
    text("InputFiles", MergeOp::Cat),
    int("FileAdler32", MergeOp::Adler32),
    text("TransferDestination", MergeOp::Same),
    text("MergeType", MergeOp::Same),
    int("HLTErrorEvents", MergeOp::Sum),
];

impl Legend {
    fn from_specs(specs: &[Spec]) -> Legend {
        let field =
            |&(name, operation, field_type): &Spec| LegendField { name: name.to_owned(), operation, field_type };
        Legend { fields: specs.iter().map(field).collect() }
    }

    /// `rawData.jsd`: NEvents, NBytes of one raw file; both sum.
    pub fn raw_data() -> Legend {
        Legend::from_specs(RAW_DATA)
    }

    /// `EoLS.jsd`: NEvents, NFiles, TotalEvents, NLostEvents, NBytes of a lumi section; all sum.
    pub fn eols() -> Legend {
        Legend::from_specs(EOLS)
    }

    /// `EoR.jsd`: NEvents (sum), NFiles (sum), NLumis (same), LastLumi (same). The two lumi fields
    /// are `same` because every BU of a run sees the same lumi sections.
    pub fn eor() -> Legend {
        Legend::from_specs(EOR)
    }

    /// The three legends of a run directory, `rawData.jsd`, `EoLS.jsd` and `EoR.jsd`: in orbit
    /// mode each with its orbit counts after the event mode's fields (NOrbits; NEmptyOrbits in
    /// EoLS and EoR), all summed.
    pub fn run_directory(orbits: bool) -> [Legend; 3] {
        let [raw, eols, eor] = if orbits { [RAW_DATA_ORBITS, EOLS_ORBITS, EOR_ORBITS] } else { [RAW_DATA, EOLS, EOR] };
        [Legend::from_specs(raw), Legend::from_specs(eols), Legend::from_specs(eor)]
    }

    /// The legend of a filter-farm output's `.jsn`, the 11 fields of docs/formats.md §8 in order.
    pub fn fu_output() -> Legend {
        Legend::from_specs(FU_OUTPUT)
    }

    /// Position of the field called `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }

    /// The `.jsd` text, compact: `{"legend":[{"name":..,"operation":..,"type":..},...]}`.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("strings and unit enums always serialize")
    }

    /// Parses a `.jsd`. Keys other than `legend` and, in entries, other than `name`, `operation`
    /// and `type` are ignored; duplicate names are refused because fields are looked up by name.
    pub fn parse(text: &str) -> Result<Legend> {
        const WHAT: &str = ".jsd legend";
        let doc = parse_object(WHAT, text)?;
        let entries = member(WHAT, &doc, "legend", "legend")?;
        let entries = entries.as_array().ok_or_else(|| json_error(WHAT, "legend", expected("an array", entries)))?;
        let mut fields: Vec<LegendField> = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            let at = format!("legend[{i}]");
            let entry = entry.as_object().ok_or_else(|| json_error(WHAT, &at, expected("an object", entry)))?;
            let key = |key: &str| {
                let field = format!("{at}.{key}");
                member(WHAT, entry, key, &field).and_then(|v| string(WHAT, &field, v)).map(|s| (s, field))
            };
            let (name, field) = key("name")?;
            if fields.iter().any(|f| f.name == name) {
                return Err(json_error(WHAT, field, format!("duplicate field name {name:?}")));
            }
            let (op, field) = key("operation")?;
            let operation =
                MergeOp::from_name(op).ok_or_else(|| unknown(WHAT, field, "operation", op, MergeOp::ALL))?;
            let (ty, field) = key("type")?;
            let field_type =
                FieldType::from_name(ty).ok_or_else(|| unknown(WHAT, field, "type", ty, FieldType::ALL))?;
            fields.push(LegendField { name: name.to_owned(), operation, field_type });
        }
        Ok(Legend { fields })
    }
}

/// A bookkeeping document in its untyped form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JsonDoc {
    /// The values, one per legend field, as decimal or plain strings.
    pub data: Vec<String>,
    /// Path of the `.jsd` that defines the values.
    pub definition: String,
    /// Who wrote the document (a host, a process).
    pub source: String,
}

impl JsonDoc {
    /// The document's text, compact, keys in the order `data`, `definition`, `source`.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("strings always serialize")
    }

    /// Parses a document; `what` names it in errors (e.g. "index JSON"). Values must be strings;
    /// a JSON number is also taken, as its text, so that hand-written files are read too. Other
    /// keys are ignored.
    pub fn parse(what: &'static str, text: &str) -> Result<JsonDoc> {
        let doc = parse_object(what, text)?;
        let data = member(what, &doc, "data", "data")?;
        let data = data.as_array().ok_or_else(|| json_error(what, "data", expected("an array", data)))?;
        let data = data
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Json::String(s) => Ok(s.clone()),
                Json::Number(n) => Ok(n.to_string()),
                other => Err(json_error(what, format!("data[{i}]"), expected("a string", other))),
            })
            .collect::<Result<_>>()?;
        let text = |key: &str| member(what, &doc, key, key).and_then(|v| string(what, key, v)).map(str::to_owned);
        Ok(JsonDoc { data, definition: text("definition")?, source: text("source")? })
    }
}

fn json_error(what: &'static str, field: impl Into<String>, problem: impl Into<String>) -> FormatError {
    FormatError::Json { what, field: field.into(), problem: problem.into() }
}

/// "expected <wanted>, found <kind of v>".
fn expected(wanted: &str, v: &Json) -> String {
    let kind = match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    };
    format!("expected {wanted}, found {kind}")
}

fn unknown<T: fmt::Display>(what: &'static str, field: String, kind: &str, found: &str, all: &[T]) -> FormatError {
    let all: Vec<String> = all.iter().map(T::to_string).collect();
    json_error(what, field, format!("unknown {kind} {found:?}; expected one of {}", all.join(", ")))
}

/// Parses `text` as a JSON object; serde's message gives the line and column of a syntax error.
fn parse_object(what: &'static str, text: &str) -> Result<Map<String, Json>> {
    match serde_json::from_str(text) {
        Ok(Json::Object(map)) => Ok(map),
        Ok(other) => Err(json_error(what, "(document)", expected("an object", &other))),
        Err(e) => Err(json_error(what, "(document)", e.to_string())),
    }
}

fn member<'a>(what: &'static str, obj: &'a Map<String, Json>, key: &str, field: &str) -> Result<&'a Json> {
    obj.get(key).ok_or_else(|| json_error(what, field, "missing"))
}

fn string<'a>(what: &'static str, field: &str, v: &'a Json) -> Result<&'a str> {
    v.as_str().ok_or_else(|| json_error(what, field, expected("a string", v)))
}

/// A type a `data` value is read as.
trait FieldValue: Sized {
    /// The value of `s`, or what is wrong with it (a phrase that follows the quoted value).
    fn read(s: &str) -> std::result::Result<Self, &'static str>;
}

impl FieldValue for u64 {
    fn read(s: &str) -> std::result::Result<Self, &'static str> {
        decimal(s).ok_or(if decimal::<u128>(s).is_some() {
            "does not fit in 64 bits"
        } else {
            "is not an unsigned integer"
        })
    }
}

impl FieldValue for String {
    fn read(s: &str) -> std::result::Result<Self, &'static str> {
        Ok(s.to_owned())
    }
}

/// A FileAdler32 value: a 32-bit checksum, or -1 for no data.
struct Checksum(Option<u32>);

impl FieldValue for Checksum {
    fn read(s: &str) -> std::result::Result<Self, &'static str> {
        match s {
            "-1" => Ok(Checksum(None)),
            _ => decimal(s).map(|c| Checksum(Some(c))).ok_or("is not -1 or a 32-bit checksum"),
        }
    }
}

/// Reads the value `s` of `field`.
fn value<T: FieldValue>(what: &'static str, field: impl fmt::Display, s: &str) -> Result<T> {
    T::read(s).map_err(|problem| json_error(what, field.to_string(), format!("{s:?} {problem}")))
}

fn count_error(what: &'static str, field: String, names: &[&str], found: usize) -> FormatError {
    json_error(what, field, format!("expected {} values ({}), found {found}", names.len(), names.join(", ")))
}

/// The values of a typed document, checked to be one per field of its standard legend.
struct Fields<'a> {
    what: &'static str,
    specs: &'static [Spec],
    data: &'a [String],
}

impl<'a> Fields<'a> {
    /// The values of `doc` read with `specs`, or with `orbit_specs` (the orbit mode's legend, its
    /// fields after those of `specs`) when it has as many values as that.
    fn of_either(
        what: &'static str,
        specs: &'static [Spec],
        orbit_specs: &'static [Spec],
        doc: &'a JsonDoc,
    ) -> Result<Self> {
        let specs = if doc.data.len() == orbit_specs.len() { orbit_specs } else { specs };
        Self::of(what, specs, doc)
    }

    /// Whether the values read are the orbit mode's (those of the longer legend).
    fn has(&self, name: &str) -> bool {
        self.specs.iter().any(|s| s.0 == name)
    }

    fn of(what: &'static str, specs: &'static [Spec], doc: &'a JsonDoc) -> Result<Self> {
        if doc.data.len() != specs.len() {
            let names: Vec<&str> = specs.iter().map(|s| s.0).collect();
            return Err(count_error(what, "data".into(), &names, doc.data.len()));
        }
        Ok(Fields { what, specs, data: &doc.data })
    }

    /// Reads the field called `name`: its position in the legend is its index in `data`.
    fn get<T: FieldValue>(&self, name: &str) -> Result<T> {
        let s = self.specs.iter().position(|s| s.0 == name).and_then(|i| self.data.get(i));
        let s = s.ok_or_else(|| json_error(self.what, name, "not in the legend"))?;
        value(self.what, name, s)
    }
}

fn doc(definition: &str, source: &str, data: Vec<String>) -> JsonDoc {
    JsonDoc { data, definition: definition.to_owned(), source: source.to_owned() }
}

/// The `.jsn` of one raw file (`rawData.jsd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexDoc {
    /// Events in the file.
    pub events: u64,
    /// Size of the file in bytes.
    pub bytes: u64,
    /// Orbit files only: orbits written in the file (NOrbits).
    pub orbits: Option<u64>,
}

impl IndexDoc {
    /// Name of the document in errors.
    pub const WHAT: &'static str = "index JSON";

    /// The document, with `definition` (path of the `.jsd`) and `source` (the writer).
    pub fn to_doc(&self, definition: &str, source: &str) -> JsonDoc {
        let values = [Some(self.events), Some(self.bytes), self.orbits];
        doc(definition, source, values.iter().flatten().map(u64::to_string).collect())
    }

    /// Reads the values of a parsed document.
    pub fn from_doc(doc: &JsonDoc) -> Result<Self> {
        let f = Fields::of_either(Self::WHAT, RAW_DATA, RAW_DATA_ORBITS, doc)?;
        let orbits = if f.has("NOrbits") { Some(f.get("NOrbits")?) } else { None };
        Ok(IndexDoc { events: f.get("NEvents")?, bytes: f.get("NBytes")?, orbits })
    }

    /// Parses the text of a document.
    pub fn parse(text: &str) -> Result<Self> {
        Self::from_doc(&JsonDoc::parse(Self::WHAT, text)?)
    }
}

/// The end-of-lumi-section `.jsn` of a BU (`EoLS.jsd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EolsDoc {
    /// Events written into files of this lumi section.
    pub events: u64,
    /// Raw files of this lumi section.
    pub files: u64,
    /// Events the trigger assigned to this BU in this lumi section.
    pub total_events: u64,
    /// Events counted as lost.
    pub lost_events: u64,
    /// Bytes written into files of this lumi section.
    pub bytes: u64,
    /// Orbit mode only: the orbits of this lumi section given to the BU.
    pub orbits: Option<OrbitCounts>,
}

/// Orbit mode's counts of orbits, in the end-of-lumi and end-of-run documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OrbitCounts {
    /// Orbits given to the BU, those with no event included (NOrbits).
    pub orbits: u64,
    /// Of them, the orbits with no event: counted, never written (NEmptyOrbits).
    pub empty_orbits: u64,
}

impl OrbitCounts {
    fn values(this: Option<Self>) -> impl Iterator<Item = u64> {
        this.into_iter().flat_map(|c| [c.orbits, c.empty_orbits])
    }

    fn read(f: &Fields<'_>) -> Result<Option<Self>> {
        if !f.has("NOrbits") {
            return Ok(None);
        }
        Ok(Some(OrbitCounts { orbits: f.get("NOrbits")?, empty_orbits: f.get("NEmptyOrbits")? }))
    }
}

impl EolsDoc {
    /// Name of the document in errors.
    pub const WHAT: &'static str = "EoLS JSON";

    /// Whether every event is accounted for (`events + lost_events == total_events`), the
    /// condition under which a BU may write the document (docs/formats.md §7).
    pub fn is_complete(&self) -> bool {
        self.events.checked_add(self.lost_events) == Some(self.total_events)
    }

    /// The document, with `definition` (path of the `.jsd`) and `source` (the writer).
    pub fn to_doc(&self, definition: &str, source: &str) -> JsonDoc {
        let v = [self.events, self.files, self.total_events, self.lost_events, self.bytes];
        let v = v.into_iter().chain(OrbitCounts::values(self.orbits));
        doc(definition, source, v.map(|n| n.to_string()).collect())
    }

    /// Reads the values of a parsed document.
    pub fn from_doc(doc: &JsonDoc) -> Result<Self> {
        let f = Fields::of_either(Self::WHAT, EOLS, EOLS_ORBITS, doc)?;
        Ok(EolsDoc {
            events: f.get("NEvents")?,
            files: f.get("NFiles")?,
            total_events: f.get("TotalEvents")?,
            lost_events: f.get("NLostEvents")?,
            bytes: f.get("NBytes")?,
            orbits: OrbitCounts::read(&f)?,
        })
    }

    /// Parses the text of a document.
    pub fn parse(text: &str) -> Result<Self> {
        Self::from_doc(&JsonDoc::parse(Self::WHAT, text)?)
    }
}

/// The end-of-run `.jsn` of a BU (`EoR.jsd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EorDoc {
    /// Events written in the run.
    pub events: u64,
    /// Raw files written in the run.
    pub files: u64,
    /// Lumi sections in the run.
    pub lumis: u64,
    /// The last lumi section.
    pub last_lumi: u64,
    /// Orbit mode only: the orbits given to the BU in the run.
    pub orbits: Option<OrbitCounts>,
}

impl EorDoc {
    /// Name of the document in errors.
    pub const WHAT: &'static str = "EoR JSON";

    /// The document, with `definition` (path of the `.jsd`) and `source` (the writer).
    pub fn to_doc(&self, definition: &str, source: &str) -> JsonDoc {
        let v = [self.events, self.files, self.lumis, self.last_lumi];
        let v = v.into_iter().chain(OrbitCounts::values(self.orbits));
        doc(definition, source, v.map(|n| n.to_string()).collect())
    }

    /// Reads the values of a parsed document.
    pub fn from_doc(doc: &JsonDoc) -> Result<Self> {
        let f = Fields::of_either(Self::WHAT, EOR, EOR_ORBITS, doc)?;
        Ok(EorDoc {
            events: f.get("NEvents")?,
            files: f.get("NFiles")?,
            lumis: f.get("NLumis")?,
            last_lumi: f.get("LastLumi")?,
            orbits: OrbitCounts::read(&f)?,
        })
    }

    /// Parses the text of a document.
    pub fn parse(text: &str) -> Result<Self> {
        Self::from_doc(&JsonDoc::parse(Self::WHAT, text)?)
    }
}

/// The `.jsn` of a filter-farm output file, per process (or merger), stream and lumi section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuOutputDoc {
    /// Events processed.
    pub processed: u64,
    /// Events accepted into this stream.
    pub accepted: u64,
    /// Events that failed processing.
    pub error_events: u64,
    /// OR of the processes' return codes.
    pub return_code_mask: u64,
    /// The data file ("" when empty).
    pub file_list: String,
    /// Size of the data file in bytes.
    pub file_size: u64,
    /// Input files, joined with ",".
    pub input_files: String,
    /// Adler-32 of the data file, or -1 when there is none (hence signed).
    pub file_adler32: i64,
    /// Where the file goes.
    pub transfer_destination: String,
    /// How the file is merged.
    pub merge_type: String,
    /// Events the HLT flagged as errors.
    pub hlt_error_events: u64,
}

impl FuOutputDoc {
    /// Name of the document in errors.
    pub const WHAT: &'static str = "FU output JSON";

    /// A lumi section without output: Filelist "", Filesize 0, FileAdler32 -1, every other count
    /// 0 and text "". Set other fields with struct update syntax.
    pub fn empty(processed: u64) -> Self {
        FuOutputDoc {
            processed,
            accepted: 0,
            error_events: 0,
            return_code_mask: 0,
            file_list: String::new(),
            file_size: 0,
            input_files: String::new(),
            file_adler32: -1,
            transfer_destination: String::new(),
            merge_type: String::new(),
            hlt_error_events: 0,
        }
    }

    /// The document, with `definition` (path of the `.jsd`) and `source` (the writer).
    pub fn to_doc(&self, definition: &str, source: &str) -> JsonDoc {
        let data = vec![
            self.processed.to_string(),
            self.accepted.to_string(),
            self.error_events.to_string(),
            self.return_code_mask.to_string(),
            self.file_list.clone(),
            self.file_size.to_string(),
            self.input_files.clone(),
            self.file_adler32.to_string(),
            self.transfer_destination.clone(),
            self.merge_type.clone(),
            self.hlt_error_events.to_string(),
        ];
        doc(definition, source, data)
    }

    /// Reads the values of a parsed document; FileAdler32 must be -1 or fit in 32 bits.
    pub fn from_doc(doc: &JsonDoc) -> Result<Self> {
        let f = Fields::of(Self::WHAT, FU_OUTPUT, doc)?;
        Ok(FuOutputDoc {
            processed: f.get("Processed")?,
            accepted: f.get("Accepted")?,
            error_events: f.get("ErrorEvents")?,
            return_code_mask: f.get("ReturnCodeMask")?,
            file_list: f.get("Filelist")?,
            file_size: f.get("Filesize")?,
            input_files: f.get("InputFiles")?,
            file_adler32: f.get::<Checksum>("FileAdler32")?.0.map_or(-1, i64::from),
            transfer_destination: f.get("TransferDestination")?,
            merge_type: f.get("MergeType")?,
            hlt_error_events: f.get("HLTErrorEvents")?,
        })
    }

    /// Parses the text of a document.
    pub fn parse(text: &str) -> Result<Self> {
        Self::from_doc(&JsonDoc::parse(Self::WHAT, text)?)
    }
}

/// Merges documents of one legend into the document of the merged file, applying each field's
/// operation across `inputs` in order (see [`MergeOp`]). A `merge` field becomes
/// `merged_file_name`, or "" when every input's is empty. An `adler32` field combines the inputs'
/// checksums using their `Filesize` field as lengths, skipping inputs with checksum -1 or size 0;
/// it is -1 when all are skipped.
///
/// The result's definition is the first input's; its source is left empty for the caller to set
/// to the merger's own name.
pub fn merge_docs(legend: &Legend, inputs: &[JsonDoc], merged_file_name: &str) -> Result<JsonDoc> {
    const WHAT: &str = "merge input";
    let Some(first) = inputs.first() else { return Err(json_error(WHAT, "(inputs)", "nothing to merge")) };
    let names: Vec<&str> = legend.fields.iter().map(|f| f.name.as_str()).collect();
    if let Some((i, doc)) = inputs.iter().enumerate().find(|(_, d)| d.data.len() != names.len()) {
        return Err(count_error(WHAT, format!("inputs[{i}].data"), &names, doc.data.len()));
    }
    let mut data = Vec::with_capacity(names.len());
    for (k, field) in legend.fields.iter().enumerate() {
        // Every input has a value at k: the counts were checked above.
        let values = || inputs.iter().map(move |d| d.data[k].as_str()).enumerate();
        let at = |i: usize| format!("inputs[{i}].{}", field.name);
        let merged = match field.operation {
            MergeOp::Sum => {
                let mut sum = 0u64;
                for (i, s) in values() {
                    sum = sum
                        .checked_add(value(WHAT, at(i), s)?)
                        .ok_or_else(|| json_error(WHAT, at(i), "sum overflows 64 bits"))?;
                }
                sum.to_string()
            }
            MergeOp::BinaryOr => {
                let mut or = 0u64;
                for (i, s) in values() {
                    or |= value::<u64>(WHAT, at(i), s)?;
                }
                or.to_string()
            }
            MergeOp::Same => {
                let one = first.data[k].as_str();
                if values().all(|(_, s)| s == one) { one } else { "N/A" }.to_owned()
            }
            MergeOp::Cat => values().map(|(_, s)| s).filter(|s| !s.is_empty()).collect::<Vec<_>>().join(","),
            MergeOp::Merge => if values().all(|(_, s)| s.is_empty()) { "" } else { merged_file_name }.to_owned(),
            MergeOp::Adler32 => {
                let size_at = legend.position("Filesize").ok_or_else(|| {
                    json_error(WHAT, field.name.as_str(), "an adler32 field needs a Filesize field in the legend")
                })?;
                let mut merged: Option<u32> = None;
                for (i, s) in values() {
                    let Checksum(checksum) = value(WHAT, at(i), s)?;
                    let size: u64 = value(WHAT, format!("inputs[{i}].Filesize"), &inputs[i].data[size_at])?;
                    if let Some(checksum) = checksum.filter(|_| size > 0) {
                        merged = Some(merged.map_or(checksum, |m| adler32_combine(m, checksum, size)));
                    }
                }
                merged.map_or(-1, i64::from).to_string()
            }
        };
        data.push(merged);
    }
    Ok(JsonDoc { data, definition: first.definition.clone(), source: String::new() })
}

/// The Adler-32 modulus: the largest prime below 2^16.
const ADLER_MOD: u32 = 65521;

/// Incremental Adler-32 (zlib's checksum), for data that arrives in pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Adler32 {
    a: u32,
    b: u32,
}

impl Default for Adler32 {
    fn default() -> Self {
        Self::new()
    }
}

impl Adler32 {
    /// The checksum of no data (1).
    pub fn new() -> Self {
        Adler32 { a: 1, b: 0 }
    }

    /// Feeds bytes, with the vector instructions the CPU has (SSSE3, AVX2), chosen at run time
    /// by the `simd-adler32` crate.
    pub fn update(&mut self, bytes: &[u8]) {
        let mut sum = simd_adler32::Adler32::from_checksum(self.finish());
        sum.write(bytes);
        let checksum = sum.finish();
        (self.a, self.b) = (checksum & 0xFFFF, checksum >> 16);
    }

    /// The checksum of everything fed so far.
    pub fn finish(&self) -> u32 {
        (self.b << 16) | self.a
    }
}

/// Adler-32 of `bytes`.
pub fn adler32(bytes: &[u8]) -> u32 {
    let mut sum = Adler32::new();
    sum.update(bytes);
    sum.finish()
}

/// The Adler-32 of the concatenation of two byte strings, from their checksums and the length of
/// the second.
///
/// With A = 1 + Σ bytes and B = Σ of A after each byte, appending n2 bytes adds their sum to A
/// and, to B, their own B plus n2 times the bytes summed before them (A1 − 1):
/// A = A1 + A2 − 1, B = B1 + B2 + n2·(A1 − 1), all mod 65521.
pub fn adler32_combine(adler1: u32, adler2: u32, len2: u64) -> u32 {
    let m = u64::from(ADLER_MOD);
    // Reduce first so that malformed halves (≥ the modulus) cannot overflow anything.
    let (a1, b1) = (u64::from(adler1 & 0xFFFF) % m, u64::from(adler1 >> 16) % m);
    let (a2, b2) = (u64::from(adler2 & 0xFFFF) % m, u64::from(adler2 >> 16) % m);
    // Every term is below 2m² < 2^34: no overflow in u64.
    let a = (a1 + a2 + m - 1) % m;
    let b = (b1 + b2 + (len2 % m) * (a1 + m - 1)) % m;
    // Both halves are below 2^16.
    ((b << 16) | a) as u32
}

/// The Adler-32 of the second of two concatenated byte strings, from the checksum of the whole,
/// the checksum of the first and the length of the second: [`adler32_combine`] undone, so that a
/// merger can drop a file's header from its checksum without reading the file again.
///
/// From A = A1 + A2 − 1 and B = B1 + B2 + n2·(A1 − 1): A2 = A − A1 + 1 and
/// B2 = B − B1 − n2·(A1 − 1), all mod 65521.
pub fn adler32_strip_prefix(whole: u32, prefix: u32, len2: u64) -> u32 {
    let m = u64::from(ADLER_MOD);
    let (a, b) = (u64::from(whole & 0xFFFF) % m, u64::from(whole >> 16) % m);
    let (a1, b1) = (u64::from(prefix & 0xFFFF) % m, u64::from(prefix >> 16) % m);
    let a2 = (a + m - a1 + 1) % m;
    let b2 = (b + m - b1 + m - (len2 % m) * ((a1 + m - 1) % m) % m) % m;
    ((b2 << 16) | a2) as u32
}

#[cfg(test)]
mod tests;
