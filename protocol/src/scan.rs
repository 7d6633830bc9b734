//! The skill scanner: what a skill's text and files would say to the model that reads them,
//! checked before anyone follows it. Every node runs it on a skill it imports, publishes,
//! receives over gossip or exports, so a listing that carries a payload is refused at every
//! door, and a management node's reviewer sees each finding before endorsing.
//!
//! A skill is scanned as written and again after the usual disguises are taken off, so a
//! payload split across lines or files, spaced out, hidden in comments or an image's alt
//! text, or encoded (base64, percent, HTML entities, `\x` escapes) is found like a plain one:
//! 1. each file, then all files joined (a payload split across files);
//! 2. each of those folded: lower case, invisible and look-alike characters mapped away, and
//!    squashed to letters and digits only (a payload split by spaces, lines or markup);
//! 3. each encoded run decoded, and the result scanned the same way (one level deep).
//!
//! | rule | severity | what |
//! |---|---|---|
//! | `hidden-unicode` | high | zero-width, tag or bidirectional control characters |
//! | `model-override` | high | instructions aimed at the reading model: ignore or forget the rules, new instructions, hide from the user |
//! | `role-markup` | high | chat or tool-call markup and role claims (`<\|im_start\|>`, `<tool_call>`, `[SYSTEM]`) |
//! | `remote-exec` | high | shell that fetches and runs remote code (`curl … \| sh`, `iex (iwr …)`, `/dev/tcp`) |
//! | `secret-read` | high | reads of secrets: SSH keys, cloud credentials, keychains, `.netrc`, or a `.env` file sent away |
//! | `env-file` | medium | a `.env` file read, not sent anywhere |
//! | `url` | medium | a URL whose host is not on the allow list |
//! | `encoded-blob` | medium | a long encoded run that does not decode to text (it cannot be read, so it cannot be checked) |
//! | `soft-hyphen` | low | soft hyphens, which hide inside words |
//!
//! A skill with a high finding is refused (a node's own is kept private); medium and low
//! findings are shown to whoever reviews it.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use aho_corasick::AhoCorasick;

/// A list of phrases looked for in one pass over a text (an Aho-Corasick automaton, built on
/// first use): the scanner runs on every listing a node ingests, beside its signature check.
struct Phrases {
    list: &'static [&'static str],
    automaton: OnceLock<Option<AhoCorasick>>,
}

impl Phrases {
    const fn new(list: &'static [&'static str]) -> Self {
        Self { list, automaton: OnceLock::new() }
    }

    /// The automaton, built on first use (`None` if it could not be: the list is then searched
    /// phrase by phrase).
    fn automaton(&self) -> Option<&AhoCorasick> {
        self.automaton.get_or_init(|| AhoCorasick::new(self.list).ok()).as_ref()
    }

    /// Where the first phrase found in `hay` starts, if any.
    fn position(&self, hay: &str) -> Option<usize> {
        match self.automaton() {
            Some(automaton) => automaton.find(hay).map(|m| m.start()),
            None => self.list.iter().filter_map(|p| hay.find(p)).min(),
        }
    }

    /// The phrase found first in `hay`, if any.
    fn find(&self, hay: &str) -> Option<&'static str> {
        match self.automaton() {
            Some(automaton) => automaton.find(hay).map(|m| self.list[m.pattern().as_usize()]),
            None => self.list.iter().copied().find(|p| hay.contains(p)),
        }
    }
}

/// Every phrase list the rules look for (each is declared above the rule that uses it).
static EVERY_LIST: [&Phrases; 8] =
    [&OVERRIDES, &MARKUP, &MARKUP_SQUASHED, &FETCH, &ALWAYS, &SECRET_READS, &SECRET_SQUASHED, &SEND];

/// Builds every phrase list's automaton now rather than on the first skill scanned: about a
/// millisecond of a core, once a process, that would otherwise fall on the first listing a
/// node receives and hold up its forwarding.
pub fn compile() {
    compile_lists(&EVERY_LIST);
}

fn compile_lists(lists: &[&Phrases]) {
    for list in lists {
        list.automaton();
    }
}

/// How much a finding weighs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Low,
    Medium,
    High,
}

/// One thing the scanner found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Finding {
    /// The rule's id (the module's table).
    pub rule: String,
    pub severity: Severity,
    /// The file it is in (`SKILL.md` for a listing's text), `a+b` for the seam of two files, or
    /// `*` for all files joined.
    pub file: String,
    /// What matched, quoted short.
    pub detail: String,
}

/// Everything the scanner found in one skill.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Report {
    pub findings: Vec<Finding>,
}

impl Report {
    /// The heaviest finding's severity, if any.
    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }

    /// Whether the skill must be refused (a high finding).
    pub fn refused(&self) -> bool {
        self.worst() == Some(Severity::High)
    }

    /// The first high finding, for a refusal's one line.
    pub fn first_high(&self) -> Option<&Finding> {
        self.findings.iter().find(|f| f.severity == Severity::High)
    }
}

/// Hosts a skill may link to without a finding: documentation and package registries.
pub const ALLOWED_HOSTS: &[&str] = &[
    "github.com",
    "docs.github.com",
    "gitlab.com",
    "docs.rs",
    "crates.io",
    "doc.rust-lang.org",
    "rust-lang.org",
    "pypi.org",
    "docs.python.org",
    "python.org",
    "npmjs.com",
    "www.npmjs.com",
    "nodejs.org",
    "developer.mozilla.org",
    "wikipedia.org",
    "en.wikipedia.org",
    "bsky.app",
    "atproto.com",
    "docs.bsky.app",
    "modelcontextprotocol.io",
    "prometheus.io",
    "grafana.com",
    "kubernetes.io",
    "docs.docker.com",
    "postgresql.org",
    "www.postgresql.org",
    "sqlite.org",
    "www.sqlite.org",
    "example.com",
    "example.org",
    "localhost",
];

/// Longest text scanned per file, in bytes (a listing is at most 64 KiB; a folder's files are
/// capped before they get here).
const MAX_SCANNED: usize = 256 * 1024;

/// Scans a skill's files (`(path, text)`, the listing's text as `SKILL.md`) against the rules
/// of the module's table, with `allowed` hosts besides [`ALLOWED_HOSTS`].
pub fn scan(files: &[(&str, &str)], allowed: &[String]) -> Report {
    let mut found = Found::default();
    let mut all = String::new();
    for (path, text) in files {
        let text = cut(text);
        scan_text(&mut found, path, text, allowed, true);
        all = joined_files(&all, text);
    }
    if files.len() > 1 {
        // What the files say together and not alone: a rule already found in a file is not
        // reported again for the files joined or for a seam.
        let alone: BTreeSet<String> = found.list.iter().map(|f| f.rule.clone()).collect();
        found.skip = alone;
        scan_text(&mut found, "*", &all, allowed, true);
        // A payload split across files in another order than their paths': every seam (the
        // end of one file followed by the start of another).
        let files = &files[..files.len().min(MAX_SEAMED)];
        for (i, (a, first)) in files.iter().enumerate() {
            for (j, (b, second)) in files.iter().enumerate() {
                if i != j {
                    let seam = joined_files(tail(cut(first), SEAM), head(cut(second), SEAM));
                    scan_text(&mut found, &format!("{a}+{b}"), &seam, allowed, false);
                }
            }
        }
    }
    Report { findings: found.list }
}

/// `second` after `first` as a reader of both would see them: on a new line, except that a
/// shell line `first` ends with a backslash goes on into `second` (`curl … \` at the end of
/// one file and `| sh` at the start of the next is one command).
fn joined_files(first: &str, second: &str) -> String {
    let mut out = String::with_capacity(first.len() + second.len() + 1);
    out.push_str(first);
    let continued = first.ends_with('\n') && first.trim_end_matches(['\n', '\r']).ends_with('\\');
    if !(first.is_empty() || continued) {
        out.push('\n');
    }
    out.push_str(second);
    out
}

/// Files whose seams are scanned pairwise, at most (a folder with more is scanned whole and
/// file by file).
const MAX_SEAMED: usize = 32;

/// Bytes each side of a seam between two files.
const SEAM: usize = 256;

fn head(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// Scans one skill's text alone.
pub fn scan_text_only(text: &str) -> Report {
    scan(&[("SKILL.md", text)], &[])
}

#[derive(Default)]
struct Found {
    list: Vec<Finding>,
    seen: BTreeSet<(String, String)>,
    /// Rules not to report (found already in a file alone).
    skip: BTreeSet<String>,
}

impl Found {
    fn add(&mut self, rule: &str, severity: Severity, file: &str, detail: &str) {
        // One finding per rule and file: the first says enough.
        if !self.skip.contains(rule) && self.seen.insert((rule.to_owned(), file.to_owned())) {
            let detail: String = detail.chars().filter(|c| !c.is_control()).take(80).collect();
            self.list.push(Finding { rule: rule.into(), severity, file: file.into(), detail });
        }
    }
}

fn cut(text: &str) -> &str {
    head(text, MAX_SCANNED)
}

fn scan_text(found: &mut Found, file: &str, text: &str, allowed: &[String], decode: bool) {
    hidden(found, file, text);
    let plain = fold(text);
    let joined = join_continuations(&plain);
    let squashed: String = plain.chars().filter(|c| c.is_alphanumeric()).collect();
    phrases(found, file, &squashed);
    markup(found, file, &plain, &squashed);
    remote_exec(found, file, &joined);
    secrets(found, file, &joined, &squashed);
    urls(found, file, text, allowed);
    if decode {
        for decoded in decodings(found, file, text) {
            scan_text(found, file, &decoded, allowed, false);
        }
    }
}

/// Zero-width, tag and bidirectional control characters; soft hyphens. A zero-width joiner
/// between two pictographs (an emoji sequence) is no finding.
fn hidden(found: &mut Found, file: &str, text: &str) {
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let code = c as u32;
        let hiding = matches!(code, 0x200B | 0x200C | 0x200E | 0x200F | 0x2060..=0x2064 | 0x061C | 0x180E)
            || matches!(code, 0x202A..=0x202E | 0x2066..=0x2069)
            || matches!(code, 0xE0000..=0xE007F)
            || (code == 0xFEFF && i > 0);
        let lone_joiner =
            code == 0x200D && !(i > 0 && pictograph(chars[i - 1]) && chars.get(i + 1).is_some_and(|&n| pictograph(n)));
        if hiding || lone_joiner {
            found.add("hidden-unicode", Severity::High, file, &format!("U+{code:04X} at character {i}"));
        } else if code == 0x00AD {
            found.add("soft-hyphen", Severity::Low, file, &format!("U+00AD at character {i}"));
        }
    }
}

fn pictograph(c: char) -> bool {
    let code = c as u32;
    code >= 0x1F000 || (0x2600..=0x27BF).contains(&code) || (0xFE00..=0xFE0F).contains(&code)
}

/// Lower case, with invisible characters removed and look-alikes (full-width forms, the
/// Cyrillic and Greek letters that pass for Latin ones) mapped to ASCII.
fn fold(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c.to_ascii_lowercase());
            continue;
        }
        let code = c as u32;
        if matches!(code, 0x200B..=0x200F | 0x2060..=0x2064 | 0xFEFF | 0x00AD | 0x202A..=0x202E | 0x2066..=0x2069)
            || (0xE0000..=0xE007F).contains(&code)
        {
            continue;
        }
        let c = if (0xFF01..=0xFF5E).contains(&code) { char::from_u32(code - 0xFEE0).unwrap_or(c) } else { c };
        let c = match c {
            'а' | 'А' | 'α' | 'Α' => 'a',
            'е' | 'Е' | 'ε' | 'Ε' => 'e',
            'о' | 'О' | 'ο' | 'Ο' => 'o',
            'р' | 'Р' | 'ρ' | 'Ρ' => 'p',
            'с' | 'С' => 'c',
            'х' | 'Х' | 'χ' => 'x',
            'у' | 'У' => 'y',
            'і' | 'І' | 'ι' | 'Ι' => 'i',
            'ѕ' | 'Ѕ' => 's',
            'ј' | 'Ј' => 'j',
            'ν' => 'v',
            'к' | 'К' | 'κ' | 'Κ' => 'k',
            'м' | 'М' | 'Μ' => 'm',
            'т' | 'Т' | 'τ' | 'Τ' => 't',
            'н' | 'Н' | 'Η' => 'h',
            'в' | 'В' | 'Β' => 'b',
            _ => c,
        };
        out.extend(c.to_lowercase());
    }
    out
}

/// Shell lines continued with a backslash joined into one, whitespace runs made one space.
fn join_continuations(text: &str) -> String {
    let joined = text.replace("\\\r\n", " ").replace("\\\n", " ");
    let mut out = String::with_capacity(joined.len());
    let mut space = false;
    for c in joined.chars() {
        if c == '\n' {
            out.push('\n');
            space = false;
        } else if c.is_whitespace() {
            if !space {
                out.push(' ');
            }
            space = true;
        } else {
            out.push(c);
            space = false;
        }
    }
    out
}

/// Instructions aimed at the reading model, on the squashed text (`model-override`).
static OVERRIDES: Phrases = Phrases::new(&[
    "forgeteverythingabove",
    "forgeteverythingyouweretold",
    "newinstructionsfollow",
    "yournewinstructionsare",
    "newsysteminstructions",
    "newsystemprompt",
    "youarenowinunrestricted",
    "youarenowdan",
    "youarenolongerbound",
    "developermodeenabled",
    "enterdevelopermode",
    "jailbreakmode",
    "donottelltheuser",
    "donotmentionthistotheuser",
    "dontmentionthistotheuser",
    "withoutinformingtheuser",
    "withouttellingtheuser",
    "hidethisfromtheuser",
    "keepthissecretfromtheuser",
    "revealyoursystemprompt",
    "printyoursystemprompt",
    "repeatyoursystemprompt",
    "thisisyoursystemprompt",
    "thefollowingisasystemmessage",
    "actasthesystem",
    "youmustobeythisskill",
    "thisskilloverrides",
    "overridesafety",
    "disableyoursafety",
    "ignoresafety",
]);

/// Instructions aimed at the model, matched on the squashed text (letters and digits only),
/// so spacing, line breaks and markup between the words do not hide them.
fn phrases(found: &mut Found, file: &str, squashed: &str) {
    const VERBS: &[&str] = &["ignore", "disregard", "forget", "override", "bypass"];
    const WHAT: &[&str] = &["instructions", "instruction", "rules", "prompt", "prompts", "guidelines", "directives"];
    // "Ignore all rules" is how linters are told to skip a file: rules count only when they
    // are the reader's own or earlier ones.
    const LOOSE: &[&str] = &["all", "the", "any", "allthe"];
    const WHICH: &[&str] = &[
        "previous",
        "prior",
        "above",
        "earlier",
        "preceding",
        "all",
        "your",
        "the",
        "any",
        "allprevious",
        "allprior",
        "allyour",
        "yourprevious",
        "theprevious",
        "theabove",
        "everyprevious",
        "allthe",
        "yourprior",
        "allabove",
    ];
    for verb in VERBS {
        for (at, _) in squashed.match_indices(verb) {
            let rest = &squashed[at + verb.len()..];
            for which in WHICH {
                let Some(rest) = rest.strip_prefix(which) else { continue };
                let fits = |w: &&&str| rest.starts_with(**w) && !(**w == "rules" && LOOSE.contains(which));
                if let Some(what) = WHAT.iter().find(fits) {
                    found.add("model-override", Severity::High, file, &format!("{verb}{which}{what}"));
                    return;
                }
            }
        }
    }
    if let Some(p) = OVERRIDES.find(squashed) {
        found.add("model-override", Severity::High, file, p);
    }
}

/// Chat and tool-call markup and role claims, on the folded text (`role-markup`).
static MARKUP: Phrases = Phrases::new(&[
    "<|im_start|>",
    "<|im_end|>",
    "<|system|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
    "<<sys>>",
    "[inst]",
    "<tool_call>",
    "</tool_call>",
    "[tool_calls]",
    "\"tool_calls\"",
    "<function_calls>",
    "<invoke name=",
    "</system>",
    "<system>",
    "[system]",
    "### system",
    "system message:",
    "system prompt:",
]);

/// The same markup spaced out, on the squashed text.
static MARKUP_SQUASHED: Phrases = Phrases::new(&["imstartsystem", "toolcallname", "startheaderidsystem"]);

/// Chat and tool-call markup, and role claims, on the folded text (and squashed, for markup
/// spaced out).
fn markup(found: &mut Found, file: &str, plain: &str, squashed: &str) {
    if let Some(m) = MARKUP.find(plain) {
        found.add("role-markup", Severity::High, file, m);
        return;
    }
    if let Some(m) = MARKUP_SQUASHED.find(squashed) {
        found.add("role-markup", Severity::High, file, m);
    }
}

/// Commands that download (`remote-exec` when what they fetch is run).
static FETCH: Phrases =
    Phrases::new(&["curl ", "wget ", "iwr ", "invoke-webrequest", "invoke-restmethod", "irm ", "fetch("]);

/// Shell that runs what it downloads, whatever follows (`remote-exec`).
static ALWAYS: Phrases = Phrases::new(&[
    "bash <(curl",
    "bash <(wget",
    "sh <(curl",
    "source <(curl",
    "eval \"$(curl",
    "eval \"$(wget",
    "eval $(curl",
    "eval $(wget",
    "sh -c \"$(curl",
    "sh -c \"$(wget",
    "bash -c \"$(curl",
    "iex (iwr",
    "iex(iwr",
    "iex (new-object net.webclient",
    "iex(new-object net.webclient",
    "invoke-expression",
    "powershell -enc",
    "powershell -e ",
    "powershell.exe -enc",
    "-encodedcommand",
    "/dev/tcp/",
    "nc -e ",
    "ncat -e ",
    "base64 -d | sh",
    "base64 -d | bash",
    "base64 --decode | sh",
    "base64 --decode | bash",
    "base64 -d|sh",
    "base64 -d|bash",
    "mkfifo /tmp/",
]);

/// Shell that fetches code and runs it.
fn remote_exec(found: &mut Found, file: &str, joined: &str) {
    const RUN: &[&str] = &[
        "| sh",
        "|sh",
        "| bash",
        "|bash",
        "| zsh",
        "| sudo sh",
        "| sudo bash",
        "| python",
        "|python",
        "| perl",
        "| iex",
        "|iex",
        "| node",
        "| ruby",
    ];
    if let Some(m) = ALWAYS.find(joined) {
        found.add("remote-exec", Severity::High, file, m);
        return;
    }
    for line in joined.lines() {
        let Some(at) = FETCH.position(line) else { continue };
        if let Some(run) = RUN.iter().find(|r| line[at..].contains(*r)) {
            found.add(
                "remote-exec",
                Severity::High,
                file,
                &format!("download piped into{}", run.trim_start_matches('|')),
            );
            return;
        }
        let rest = &line[at..];
        if (rest.contains("exec(") || rest.contains("eval("))
            && (rest.contains("urlopen") || rest.contains("requests.get"))
        {
            found.add("remote-exec", Severity::High, file, "downloaded code evaluated");
            return;
        }
    }
    if joined.contains("urlopen(") && (joined.contains("exec(") || joined.contains("eval(")) {
        found.add("remote-exec", Severity::High, file, "downloaded code evaluated");
    }
}

/// Paths and commands that read secrets (`secret-read`).
static SECRET_READS: Phrases = Phrases::new(&[
    "~/.ssh",
    "$home/.ssh",
    "/.ssh/",
    "id_rsa",
    "id_ed25519",
    "id_ecdsa",
    "authorized_keys",
    ".aws/credentials",
    "aws_secret_access_key",
    ".config/gcloud",
    "application_default_credentials",
    ".azure/accesstokens",
    ".kube/config",
    ".docker/config.json",
    "~/.netrc",
    "/.netrc",
    ".git-credentials",
    ".pypirc",
    "/etc/shadow",
    "login.keychain",
    "find-generic-password",
    "find-internet-password",
    "dump-keychain",
    "keychain access",
    "wallet.dat",
    "gnome-keyring",
    "kwallet",
    "browser cookies",
    "cookies.sqlite",
    "login data",
]);

/// The same, on the squashed text.
static SECRET_SQUASHED: Phrases =
    Phrases::new(&["sshprivatekey", "idrsa", "awscredentials", "awssecretaccesskey", "yourprivatekeys"]);

/// What sends a file away: a `.env` read beside one is `secret-read`, not `env-file`.
static SEND: Phrases = Phrases::new(&[
    "curl -d",
    "curl --data",
    "curl -f ",
    "curl -t ",
    "--upload-file",
    "-x post",
    "--request post",
    "wget --post",
    "requests.post",
    "fetch(",
    "nc ",
    "scp ",
    "send it to",
    "send them to",
    "post it to",
    "upload it to",
    "send the contents",
    "email it to",
]);

/// Reads of secrets; a `.env` file is high only when something is also sent away.
fn secrets(found: &mut Found, file: &str, joined: &str, squashed: &str) {
    if let Some(m) = SECRET_READS.find(joined) {
        found.add("secret-read", Severity::High, file, m);
        return;
    }
    if let Some(m) = SECRET_SQUASHED.find(squashed) {
        found.add("secret-read", Severity::High, file, m);
        return;
    }
    let env_file = joined.split(|c: char| c.is_whitespace() || "\"'`(),;@=<>".contains(c)).any(|w| {
        let w = w.trim_start_matches("./").trim_start_matches("~/");
        w == ".env" || w.ends_with("/.env") || w.starts_with(".env.")
    });
    if !env_file {
        return;
    }
    if let Some(m) = SEND.find(joined) {
        found.add("secret-read", Severity::High, file, &format!(".env sent away ({})", m.trim()));
    } else {
        found.add("env-file", Severity::Medium, file, ".env");
    }
}

/// URLs whose host is not on the allow list (a subdomain of an allowed host is allowed).
fn urls(found: &mut Found, file: &str, text: &str, allowed: &[String]) {
    let lower = text.to_lowercase();
    let mut rest = lower.as_str();
    while let Some(at) = rest.find("://") {
        let scheme_start = rest[..at].rfind(|c: char| !c.is_ascii_alphanumeric()).map_or(0, |i| i + 1);
        let scheme = &rest[scheme_start..at];
        let after = &rest[at + 3..];
        rest = after;
        if !matches!(scheme, "http" | "https" | "ftp" | "ws" | "wss") {
            continue;
        }
        let authority: String = after
            .chars()
            .take_while(|c| !matches!(c, '/' | '?' | '#' | ' ' | ')' | '"' | '\'' | '>' | '<' | ']' | '\n' | '`'))
            .collect();
        let host = authority.rsplit('@').next().unwrap_or("");
        let host = host.split(':').next().unwrap_or("").trim_end_matches('.');
        if host.is_empty() {
            continue;
        }
        let under = |a: &str| {
            !a.is_empty() && host.ends_with(a) && (host.len() == a.len() || host[..host.len() - a.len()].ends_with('.'))
        };
        let ok = host == "127.0.0.1"
            || ALLOWED_HOSTS.iter().any(|a| under(a))
            || allowed.iter().any(|a| under(&a.trim().to_lowercase()));
        if !ok {
            found.add("url", Severity::Medium, file, host);
        }
    }
}

/// The encoded runs of `text` decoded: base64 runs of 24 characters or more, percent-encoded
/// and HTML-entity runs, and `\x`/`\u` escapes. A long run that decodes to no text is a
/// finding of its own.
fn decodings(found: &mut Found, file: &str, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for run in text.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '-' | '_'))) {
        let run = run.trim_end_matches('=');
        if run.len() < 24 || !run.chars().any(|c| c.is_ascii_digit() || c.is_ascii_uppercase()) {
            continue;
        }
        let padded = format!("{run}{}", "=".repeat((4 - run.len() % 4) % 4));
        let decoded = data_encoding::BASE64
            .decode(padded.as_bytes())
            .or_else(|_| data_encoding::BASE64URL.decode(padded.as_bytes()))
            .ok();
        match decoded.and_then(|d| String::from_utf8(d).ok()) {
            Some(s)
                if s.chars().filter(|c| !c.is_control() || c.is_whitespace()).count() * 10 >= s.chars().count() * 9 =>
            {
                out.push(s)
            }
            _ if run.len() >= 200 => {
                found.add("encoded-blob", Severity::Medium, file, &format!("{} characters", run.len()))
            }
            _ => {}
        }
    }
    let unescaped = unescape(text);
    if unescaped != text {
        out.push(unescaped);
    }
    out
}

/// `text` with percent-encoding, HTML entities and `\x`/`\u` escapes decoded.
fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    let mut i = 0;
    let hex = |s: &[u8]| std::str::from_utf8(s).ok().and_then(|s| u32::from_str_radix(s, 16).ok());
    let push_char = |out: &mut Vec<u8>, code: u32| {
        if let Some(c) = char::from_u32(code) {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
    };
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%'
            && i + 3 <= bytes.len()
            && let Some(v) = hex(&bytes[i + 1..i + 3])
        {
            out.push(v as u8);
            i += 3;
            continue;
        }
        if b == b'\\'
            && bytes.get(i + 1) == Some(&b'x')
            && i + 4 <= bytes.len()
            && let Some(v) = hex(&bytes[i + 2..i + 4])
        {
            out.push(v as u8);
            i += 4;
            continue;
        }
        if b == b'\\'
            && bytes.get(i + 1) == Some(&b'u')
            && i + 6 <= bytes.len()
            && let Some(v) = hex(&bytes[i + 2..i + 6])
        {
            push_char(&mut out, v);
            i += 6;
            continue;
        }
        if b == b'&'
            && bytes.get(i + 1) == Some(&b'#')
            && let Some(end) = bytes[i..].iter().take(10).position(|&c| c == b';')
        {
            let body = &bytes[i + 2..i + end];
            let code = match body.first() {
                Some(b'x') | Some(b'X') => hex(&body[1..]),
                _ => std::str::from_utf8(body).ok().and_then(|s| s.parse().ok()),
            };
            if let Some(code) = code {
                push_char(&mut out, code);
                i += end + 1;
                continue;
            }
        }
        out.push(b);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests;
