//! Report on a JSON bookkeeping file (`.jsn`) or a definition (`.jsd`), read as its name says it
//! is: a raw file's index JSON, an EoLS or EoR record, or an FU output document.

use crate::event::Problem;
use serde::Serialize;
use tessera_formats::bookkeeping::{EolsDoc, EorDoc, FuOutputDoc, IndexDoc, JsonDoc, Legend};
use tessera_formats::names::{BuFileName, StreamFileName};

/// A bookkeeping file: what kind it is, its fields by name, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JsonReport {
    /// The file's name as given.
    pub path: String,
    /// What the name says it is, e.g. "index JSON".
    pub kind: String,
    /// Field names and values, in order.
    pub fields: Vec<(String, String)>,
    /// What is wrong.
    pub problems: Vec<Problem>,
}

/// Reads the bookkeeping file `text` named `path`.
pub fn inspect_json(path: &str, text: &str) -> JsonReport {
    let name = path.rsplit('/').next().unwrap_or(path);
    let mut report =
        JsonReport { path: path.to_owned(), kind: String::new(), fields: Vec::new(), problems: Vec::new() };
    if name.ends_with(".jsd") {
        report.kind = "definition (.jsd)".into();
        match Legend::parse(text) {
            Ok(legend) => {
                report.fields = legend
                    .fields
                    .iter()
                    .map(|f| (f.name.clone(), format!("{} {}", f.operation, f.field_type)))
                    .collect()
            }
            Err(e) => report.problems.push(Problem::whole(e.to_string())),
        }
        return report;
    }
    type Check = fn(&str) -> tessera_formats::Result<()>;
    let (kind, legend, check): (&str, Option<Legend>, Check) = match BuFileName::parse(name) {
        Ok(BuFileName::IndexJson { .. }) => {
            (IndexDoc::WHAT, Some(Legend::raw_data()), |t| IndexDoc::parse(t).map(drop))
        }
        Ok(BuFileName::EndOfLumi { .. }) => (EolsDoc::WHAT, Some(Legend::eols()), |t| EolsDoc::parse(t).map(drop)),
        Ok(BuFileName::EndOfRun { .. }) => (EorDoc::WHAT, Some(Legend::eor()), |t| EorDoc::parse(t).map(drop)),
        _ if StreamFileName::parse(name).is_ok() => {
            (FuOutputDoc::WHAT, Some(Legend::fu_output()), |t| FuOutputDoc::parse(t).map(drop))
        }
        _ => ("JSON document", None, |t| JsonDoc::parse("JSON document", t).map(drop)),
    };
    report.kind = kind.into();
    if let Err(e) = check(text) {
        report.problems.push(Problem::whole(e.to_string()));
    }
    if let Ok(doc) = JsonDoc::parse("JSON document", text) {
        let names = legend.map(|l| l.fields.into_iter().map(|f| f.name).collect::<Vec<_>>()).unwrap_or_default();
        report.fields = doc
            .data
            .iter()
            .enumerate()
            .map(|(i, v)| (names.get(i).cloned().unwrap_or_else(|| format!("data[{i}]")), v.clone()))
            .chain([("definition".into(), doc.definition.clone()), ("source".into(), doc.source.clone())])
            .collect();
    }
    report
}
