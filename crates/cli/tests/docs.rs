//! The documentation as a reader follows it, and the files that packaging makes from the binary.
//!
//! - Every relative link of every Markdown file of the repository (outside `target/` and the fuzz
//!   corpus) leads to a file, and its `#anchor` to a heading of that file (GitHub's anchor rules).
//! - Every citation of a numbered section resolves. Convention: a page whose sections are cited
//!   numbers them in its headings, `## 7. BU run directory and bookkeeping`; a citation names the
//!   page and the section, `docs/formats.md §7` (or `formats.md §7`), a lettered paragraph of it
//!   as `§7 (a)` (the section then holds `(a)`), several as `§4, §5 and §8` or `§4–§7`. A bare
//!   `§7` in a Markdown page cites that page; in any other file it must name its document.
//! - No file refers to documents kept outside the repository.
//! - `tessera completions SHELL` and `tessera man` cover every subcommand.
//!
//! The checkers are also run on small broken pages, so that a test shows they can fail. Those
//! pages are written by this file, which is therefore left out of the citation check.

#[allow(dead_code)] // each test binary uses a part of the shared helpers
mod common;

use common::tessera;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

/// Names of documents that live outside the repository, which no file may cite. Built from
/// pieces so that this file does not cite them itself.
fn outside_documents() -> Vec<String> {
    vec![
        ["FORM", "ATS"].concat(),
        ["DES", "IGN", ".md"].concat(),
        ["NO", "TES", ".md"].concat(),
        ["..", "/sha", "red"].concat(),
    ]
}

/// This file, from the root: its broken pages cite sections that do not exist, on purpose.
const THIS_FILE: &str = "crates/cli/tests/docs.rs";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Paths (relative to the root) of directories that hold no documentation: build output,
/// fuzz data, and what runs leave in the working tree.
fn skipped(relative: &Path) -> bool {
    let s = relative.to_string_lossy();
    [".git", "target", "fuzz/target", "fuzz/corpus", "fuzz/artifacts", "bench-out", "tessera-demo"].contains(&&*s)
        || s.starts_with("tessera-run")
}

/// Every text file of the repository: its path relative to the root, and its text. Files that
/// are not UTF-8 (binary test inputs) are left out.
fn text_files(root: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![PathBuf::new()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(root.join(&dir)).unwrap() {
            let entry = entry.unwrap();
            let relative = dir.join(entry.file_name());
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                if !skipped(&relative) {
                    dirs.push(relative);
                }
            } else if kind.is_file()
                && let Ok(text) = fs::read_to_string(entry.path())
            {
                out.push((relative, text));
            }
        }
    }
    out.sort();
    out
}

fn is_markdown(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "md")
}

/// `a/b/../c` as `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The lines of a Markdown page outside fenced code blocks, with their numbers (from 1).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// A line with its inline code spans blanked out (same length), so that text shown as code is
/// neither a link nor a citation.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else if in_code {
            out.extend(std::iter::repeat_n(' ', c.len_utf8()));
        } else {
            out.push(c);
        }
    }
    out
}

/// GitHub's anchor of a heading: the text as shown (links by their text, code without its
/// backticks), lower case, every character but letters, digits, `-`, `_` and spaces dropped,
/// spaces turned into `-`.
fn anchor_of(heading: &str) -> String {
    let mut shown = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        shown.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find("](").and_then(|close| after[close..].find(')').map(|end| (close, close + end))) {
            Some((close, end)) => {
                shown.push_str(&after[..close]);
                rest = &after[end + 1..];
            }
            None => {
                shown.push('[');
                rest = after;
            }
        }
    }
    shown.push_str(rest);
    shown
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

/// A Markdown page's headings: (level, text), outside code blocks.
fn headings(text: &str) -> Vec<(usize, String)> {
    prose_lines(text)
        .into_iter()
        .filter_map(|(_, line)| {
            let level = line.chars().take_while(|&c| c == '#').count();
            let rest = &line[level..];
            ((1..=6).contains(&level) && rest.starts_with(' '))
                .then(|| (level, rest.trim().trim_end_matches('#').trim_end().to_owned()))
        })
        .collect()
}

/// Every anchor a page has: its headings' (with GitHub's `-1`, `-2` for repeats) and explicit
/// `id="..."` or `name="..."` attributes.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, heading) in headings(text) {
        let base = anchor_of(&heading);
        let count = seen.entry(base.clone()).or_insert(0);
        out.insert(if *count == 0 { base.clone() } else { format!("{base}-{count}") });
        *count += 1;
    }
    for attribute in ["id=\"", "name=\""] {
        for (at, _) in text.match_indices(attribute) {
            let value = &text[at + attribute.len()..];
            if let Some(end) = value.find('"') {
                out.insert(value[..end].to_owned());
            }
        }
    }
    out
}

/// The link targets of a Markdown page with their line numbers: inline links and images
/// `[text](target "title")`, and reference definitions `[name]: target`.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (number, line) in prose_lines(text) {
        let line = without_code_spans(line);
        let trimmed = line.trim_start();
        if trimmed.starts_with('[')
            && let Some(close) = trimmed.find("]:")
        {
            if let Some(target) = trimmed[close + 2..].split_whitespace().next() {
                out.push((number, target.trim_matches(['<', '>']).to_owned()));
            }
            continue;
        }
        for (at, _) in line.match_indices("](") {
            let target = &line[at + 2..];
            if let Some(end) = target.find(')') {
                let target = target[..end].split_whitespace().next().unwrap_or("");
                out.push((number, target.trim_matches(['<', '>']).to_owned()));
            }
        }
    }
    out
}

/// What is wrong with the relative links of the Markdown pages among `files`.
fn broken_links(root: &Path, files: &[(PathBuf, String)]) -> Vec<String> {
    let texts: BTreeMap<PathBuf, &str> = files.iter().map(|(p, t)| (p.clone(), t.as_str())).collect();
    let mut problems = Vec::new();
    for (path, text) in files.iter().filter(|(p, _)| is_markdown(p)) {
        for (line, target) in link_targets(text) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let resolved = if file.is_empty() {
                path.clone()
            } else if let Some(from_root) = file.strip_prefix('/') {
                normalize(Path::new(from_root))
            } else {
                normalize(&path.parent().unwrap_or(Path::new("")).join(file))
            };
            let at = format!("{}:{line}: link {target}", path.display());
            if !root.join(&resolved).exists() {
                problems.push(format!("{at}: {} does not exist", resolved.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                match texts.get(&resolved) {
                    Some(target_text) if is_markdown(&resolved) => {
                        if !anchors(target_text).contains(anchor) {
                            problems.push(format!("{at}: {} has no heading with anchor #{anchor}", resolved.display()));
                        }
                    }
                    _ => problems.push(format!("{at}: an anchor into {}, which is not a page", resolved.display())),
                }
            }
        }
    }
    problems
}

/// The numbered sections of a page: number → the text of the section (heading to the next
/// heading of the same or a higher level).
fn numbered_sections(text: &str) -> BTreeMap<u32, String> {
    let lines = prose_lines(text);
    let mut out = BTreeMap::new();
    for (k, (_, line)) in lines.iter().enumerate() {
        let level = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&level) || !line[level..].starts_with(' ') {
            continue;
        }
        let title = line[level..].trim_start();
        let digits: String = title.chars().take_while(char::is_ascii_digit).collect();
        if digits.is_empty() || !title[digits.len()..].starts_with(". ") {
            continue;
        }
        let body: Vec<&str> = lines[k + 1..]
            .iter()
            .map(|(_, l)| *l)
            .take_while(|l| {
                let deeper = l.chars().take_while(|&c| c == '#').count();
                !((1..=level).contains(&deeper) && l[deeper..].starts_with(' '))
            })
            .collect();
        out.insert(digits.parse().unwrap(), body.join("\n"));
    }
    out
}

/// One citation of a section: the page as written (`None`: the citing page itself), the
/// section, its lettered paragraph if any, and the line it is on.
#[derive(Debug, PartialEq)]
struct Citation {
    page: Option<String>,
    section: u32,
    paragraph: Option<char>,
    line: usize,
}

/// Characters that may stand between a page's name and `§` when a citation breaks across
/// comment lines: white space and comment markers.
fn is_filler(c: char) -> bool {
    c.is_whitespace() || matches!(c, '/' | '!' | '#' | '*' | '>')
}

/// The citations of `text`, and the `§` signs of a file other than Markdown that name no
/// document (as `RFC 9112 §2.2` does).
fn citations(text: &str, markdown: bool) -> (Vec<Citation>, Vec<usize>) {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let line_of = |byte: usize| text[..byte].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut unnamed = Vec::new();
    let mut k = 0;
    while k < chars.len() {
        if chars[k].1 != '§' {
            k += 1;
            continue;
        }
        // The page: the word before the sign, past fillers, if it ends in `.md`; a sign that
        // follows a citation list (`§4, §5 and §8`, `§4–§7`) is handled with it, below.
        let mut j = k;
        while j > 0 && is_filler(chars[j - 1].1) {
            j -= 1;
        }
        let mut start = j;
        while start > 0 && (chars[start - 1].1.is_alphanumeric() || matches!(chars[start - 1].1, '.' | '/' | '_' | '-'))
        {
            start -= 1;
        }
        let word: String = chars[start..j].iter().map(|(_, c)| c).collect();
        let page = word.ends_with(".md").then_some(word.clone());
        if page.is_none() && !markdown {
            let before: String =
                chars[..j].iter().rev().take(12).map(|(_, c)| c).collect::<Vec<_>>().into_iter().rev().collect();
            let names_document = before.trim_end().rsplit(' ').nth(1).is_some_and(|w| w.ends_with("RFC"));
            if !names_document {
                unnamed.push(line_of(chars[k].0));
            }
            k += 1;
            continue;
        }
        // The list of sections that follows.
        loop {
            let mut m = k + 1;
            let digits: String = chars[m..].iter().map(|(_, c)| *c).take_while(char::is_ascii_digit).collect();
            m += digits.len();
            let Ok(section) = digits.parse() else { break };
            let paragraph = match chars.get(m..m + 4) {
                Some([(_, ' '), (_, '('), (_, letter), (_, ')')]) if letter.is_ascii_lowercase() => {
                    m += 4;
                    Some(*letter)
                }
                _ => None,
            };
            out.push(Citation { page: page.clone(), section, paragraph, line: line_of(chars[k].0) });
            let rest: String = chars[m..].iter().take(8).map(|(_, c)| c).collect();
            let next = ["–§", "-§", ", §", " and §", ", and §"].iter().find(|sep| rest.starts_with(**sep));
            match next {
                Some(sep) => k = m + sep.chars().count() - 1,
                None => {
                    k = m;
                    break;
                }
            }
        }
    }
    (out, unnamed)
}

/// Where a cited page is: beside the citing file, from the root, or in `docs/`.
fn find_page(root: &Path, citing: &Path, page: &str) -> Option<PathBuf> {
    [citing.parent().unwrap_or(Path::new("")).join(page), PathBuf::from(page), Path::new("docs").join(page)]
        .into_iter()
        .map(|p| normalize(&p))
        .find(|p| root.join(p).is_file())
}

/// What is wrong with the section citations among `files`.
fn broken_citations(root: &Path, files: &[(PathBuf, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    for (path, text) in files.iter().filter(|(p, _)| p != Path::new(THIS_FILE)) {
        let markdown = is_markdown(path);
        let (cited, unnamed) = citations(text, markdown);
        for line in unnamed {
            problems.push(format!(
                "{}:{line}: a section cited without its document (write `docs/formats.md §7`)",
                path.display()
            ));
        }
        for citation in cited {
            let at = format!("{}:{}", path.display(), citation.line);
            let page = match &citation.page {
                None => Some(path.clone()),
                Some(page) => find_page(root, path, page),
            };
            let Some(page) = page else {
                problems.push(format!("{at}: cites {}, which is not in the repository", citation.page.unwrap()));
                continue;
            };
            let page_text = fs::read_to_string(root.join(&page)).unwrap();
            let sections = numbered_sections(&page_text);
            match sections.get(&citation.section) {
                None => problems.push(format!(
                    "{at}: cites {} §{}, which has no heading `## {}. ...` (it has {:?})",
                    page.display(),
                    citation.section,
                    citation.section,
                    sections.keys().collect::<Vec<_>>()
                )),
                Some(body) => {
                    if let Some(letter) = citation.paragraph
                        && !body.contains(&format!("({letter})"))
                    {
                        problems.push(format!(
                            "{at}: cites {} §{} ({letter}), but the section has no paragraph ({letter})",
                            page.display(),
                            citation.section
                        ));
                    }
                }
            }
        }
    }
    problems
}

/// The files that name a document kept outside the repository.
fn outside_references(files: &[(PathBuf, String)]) -> Vec<String> {
    let names = outside_documents();
    let mut problems = Vec::new();
    for (path, text) in files {
        for (number, line) in text.lines().enumerate() {
            for name in names.iter().filter(|n| line.contains(n.as_str())) {
                problems.push(format!(
                    "{}:{}: names {name}, which is not in the repository",
                    path.display(),
                    number + 1
                ));
            }
        }
    }
    problems
}

fn assert_none(what: &str, problems: &[String]) {
    assert!(problems.is_empty(), "{} {what}:\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn every_relative_link_of_the_documentation_leads_to_a_file_and_heading() {
    let root = repo_root();
    let files = text_files(&root);
    assert!(files.iter().filter(|(p, _)| is_markdown(p)).count() >= 6, "the pages were not found under {root:?}");
    assert_none("broken links", &broken_links(&root, &files));
}

#[test]
fn every_cited_section_exists() {
    let root = repo_root();
    let files = text_files(&root);
    let problems = broken_citations(&root, &files);
    assert_none("broken section citations", &problems);
    // The formats page is cited from the code, section by section: the citations were found.
    let cited_from_code = files
        .iter()
        .filter(|(p, _)| p.extension().is_some_and(|e| e == "rs"))
        .flat_map(|(_, t)| citations(t, false).0)
        .filter(|c| c.page.as_deref() == Some("docs/formats.md"))
        .count();
    assert!(cited_from_code >= 30, "only {cited_from_code} citations of docs/formats.md found in the code");
}

#[test]
fn no_file_names_a_document_outside_the_repository() {
    let files = text_files(&repo_root());
    assert!(files.iter().any(|(p, _)| p == Path::new("README.md")), "the README was not among the files");
    assert_none("references to documents outside the repository", &outside_references(&files));
}

/// The checkers on a small repository of broken pages: each fault is reported, and the one page
/// without a fault is not.
#[test]
fn the_checkers_report_broken_links_citations_and_outside_documents() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::create_dir(root.join("docs")).unwrap();
    let page = "# Page\n\n## 1. First\n\nClaims: (a) by rename.\n\n## 2. Run summary (`summary.json`)\n\ntext\n";
    fs::write(root.join("docs/page.md"), page).unwrap();
    let readme = "\
See [page](docs/page.md#2-run-summary-summaryjson), [gone](docs/gone.md), [no heading](docs/page.md#3-third),
`[code](docs/not-a-link.md)` and [web](https://example.org/x.md).

```
[in a block](docs/also-not-a-link.md)
```

docs/page.md §1 (a), §2 and docs/page.md §1–§3; page.md §1 (b); docs/gone.md §1; §2 of this page.
";
    fs::write(root.join("README.md"), readme).unwrap();
    let code =
        format!("//! docs/page.md\n//! §2, and a bare §1; RFC 9112 §2.2 is fine. {}\n", ["NO", "TES", ".md"].concat());
    fs::write(root.join("lib.rs"), &code).unwrap();
    let files = text_files(root);

    let links = broken_links(root, &files);
    assert_eq!(links.len(), 2, "{links:#?}");
    assert!(links[0].contains("README.md:1: link docs/gone.md: docs/gone.md does not exist"), "{links:#?}");
    assert!(links[1].contains("no heading with anchor #3-third"), "{links:#?}");

    let cited = broken_citations(root, &files);
    let expected = [
        "README.md:8: cites docs/page.md §3, which has no heading",
        "README.md:8: cites docs/page.md §1 (b), but the section has no paragraph (b)",
        "README.md:8: cites docs/gone.md, which is not in the repository",
        "README.md:8: cites README.md §2, which has no heading",
        "lib.rs:2: a section cited without its document",
    ];
    assert_eq!(cited.len(), expected.len(), "{cited:#?}");
    for (found, expected) in cited.iter().zip(expected) {
        assert!(found.starts_with(expected), "{found}\n  expected to start with\n{expected}");
    }

    let outside = outside_references(&files);
    assert_eq!(outside.len(), 1, "{outside:#?}");
    assert!(outside[0].starts_with("lib.rs:2: names"), "{outside:#?}");
}

#[test]
fn anchors_follow_githubs_rules() {
    for (heading, anchor) in [
        ("12. Front-end emulator", "12-front-end-emulator"),
        (
            "Running across hosts: `tessera agent` and the controller",
            "running-across-hosts-tessera-agent-and-the-controller",
        ),
        ("Run summary (`summary.json`)", "run-summary-summaryjson"),
        ("The [user guide](docs/user-guide.md) and *more*", "the-user-guide-and-more"),
    ] {
        assert_eq!(anchor_of(heading), anchor, "{heading}");
    }
    let repeated = anchors("# A\n## Notes\n## Notes\n<a id=\"kept\"></a>\n");
    assert_eq!(repeated, ["a", "kept", "notes", "notes-1"].map(String::from).into_iter().collect());
}

/// The subcommands `tessera --help` lists (without `help`), as a user sees them.
fn subcommands() -> Vec<String> {
    let out = tessera(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let list = help.split("Commands:").nth(1).expect("a Commands: section").split("\n\n").next().unwrap();
    let names: Vec<String> = list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(String::from)
        .collect();
    for expected in ["run", "verify", "completions", "man"] {
        assert!(names.iter().any(|n| n == expected), "{expected} is not among {names:?}");
    }
    names
}

#[test]
fn completions_for_each_shell_name_every_subcommand() {
    let names = subcommands();
    for shell in ["bash", "zsh", "fish"] {
        let out = tessera(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", String::from_utf8_lossy(&out.stderr));
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.len() > 1000, "{shell}: a script of {} bytes", script.len());
        for name in &names {
            assert!(script.contains(name.as_str()), "{shell}: the script does not mention `{name}`");
        }
        // The script must also be one the shell can read: check its syntax where the shell is
        // installed (the checks above are the test's own, and do not need it).
        let check: &[&str] = match shell {
            "fish" => &["--no-execute"],
            _ => &["-n"],
        };
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tessera-completion");
        fs::write(&file, &script).unwrap();
        match Command::new(shell).args(check).arg(&file).output() {
            Ok(syntax) => assert!(
                syntax.status.success(),
                "{shell} cannot read the script: {}",
                String::from_utf8_lossy(&syntax.stderr)
            ),
            Err(_) => eprintln!("{shell} is not installed: its script's syntax is not checked"),
        }
    }
    let out = tessera(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "an unknown shell is refused");
    assert!(String::from_utf8_lossy(&out.stderr).contains("tcsh"));
}

/// Checks that `page` is a manual page titled `title`: roff with `.TH`, a NAME and a SYNOPSIS,
/// and, where groff is installed, no warning from it (read as UTF-8 through its preprocessor, `-k`,
/// as `man` reads it).
fn assert_man_page(page: &str, title: &str) {
    let th = page.lines().find(|l| l.starts_with(".TH ")).unwrap_or_else(|| panic!("{title}: no .TH line"));
    assert!(th.starts_with(&format!(".TH {title} 1 ")), "{title}: {th}");
    for section in [".SH NAME", ".SH SYNOPSIS"] {
        assert!(page.contains(section), "{title}: no {section}");
    }
    match Command::new("groff")
        .args(["-k", "-man", "-Tutf8", "-ww", "-z"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(mut groff) => {
            use std::io::Write;
            groff.stdin.take().unwrap().write_all(page.as_bytes()).unwrap();
            let out = groff.wait_with_output().unwrap();
            let warnings = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success() && warnings.is_empty(), "{title}: groff says\n{warnings}");
        }
        Err(_) => eprintln!("groff is not installed: the roff of {title} is not checked by it"),
    }
}

#[test]
fn the_manual_page_names_every_subcommand_and_each_has_its_own() {
    let names = subcommands();
    let out = tessera(&["man"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = String::from_utf8(out.stdout).unwrap();
    assert_man_page(&page, "tessera");
    let listed = page.split(".SH SUBCOMMANDS").nth(1).expect("a SUBCOMMANDS section");
    for name in &names {
        assert!(listed.contains(&format!("tessera\\-{}", name.replace('-', "\\-"))), "tessera.1 does not list {name}");
    }

    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("share/man/man1");
    let out = tessera(&["man", "--output", out_dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut pages: Vec<String> =
        fs::read_dir(&out_dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    pages.sort();
    for name in names.iter().map(|n| format!("tessera-{n}")).chain(["tessera".to_owned()]) {
        let file = format!("{name}.1");
        assert!(pages.contains(&file), "{file} is not among {pages:?}");
        assert_man_page(&fs::read_to_string(out_dir.join(&file)).unwrap(), &name);
    }
    // Subcommands of subcommands have theirs too.
    for nested in ["tessera-config-check.1", "tessera-config-default.1"] {
        assert!(pages.iter().any(|p| p == nested), "{nested} is not among {pages:?}");
    }
}
