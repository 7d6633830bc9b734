//! The scenarios' scripted model: what a model would decide, written as rules on the text
//! of each request, so the scenarios can assert the agent's decisions.

use druse_tests::llm::{Answer, Request};
use serde_json::json;

/// One notification of the batch, as the prompt lists it.
#[derive(Debug, Clone)]
struct Listed {
    uri: String,
    text: String,
}

fn listed(request: &Request) -> Vec<Listed> {
    let text = request.text();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if let Some(uri) = line.trim().strip_prefix("- uri: ") {
            let text = lines
                .get(i + 2)
                .and_then(|l| l.trim().strip_prefix("text: "))
                .and_then(|q| serde_json::from_str::<String>(q).ok())
                .unwrap_or_default();
            out.push(Listed { uri: uri.trim().to_owned(), text });
        }
    }
    out
}

/// The scenarios' model: replies to every notification of a batch, following simple
/// commands in the post text; extracts "my favorite color is X" as an observation (a
/// correction when the user says "actually"); reconciles a new value of a stored subject and
/// attribute as an UPDATE; and plays the musing, reflection and review entry points.
pub(crate) fn script(request: &Request) -> Answer {
    match request.schema_name().as_deref() {
        Some("reconciliation") => return reconcile(request),
        Some(_) => return extract(request),
        None => {}
    }
    if request.last_role() == "tool" {
        return Answer::Text("done".into());
    }
    let tools = request.tool_names();
    let system = request.messages().first().and_then(|m| m["content"].as_str().map(str::to_owned)).unwrap_or_default();
    if tools.is_empty() && system.contains("You prepare the memories") {
        return synthesis(request);
    }
    if tools.is_empty() && system.contains("impression of @") {
        let first = request.text().lines().find_map(|l| l.trim().strip_prefix("- ").map(str::to_owned));
        return Answer::Text(format!("Someone who told me {}", first.unwrap_or_default()));
    }
    let offers = |name: &str| tools.iter().any(|t| t == name);
    if offers("write_summary") {
        let n = request.text().lines().filter(|l| l.trim_start().starts_with("- [")).count();
        let mut calls = vec![("write_summary".into(), json!({"text": format!("a day of {n} memories")}))];
        if offers("post") {
            calls.push(("post".into(), json!({"text": "a quiet day of tides and new faces"})));
        }
        return Answer::Tools(calls);
    }
    if offers("archive") {
        return review(request);
    }
    if !offers("reply") {
        return Answer::Tools(vec![("post".into(), json!({"text": "a quiet thought from the swarm"}))]);
    }
    let mut calls = Vec::new();
    for n in listed(request) {
        if let Some(rest) = n.text.split("reply elsewhere ").nth(1) {
            let target = rest.split_whitespace().next().unwrap_or_default().to_owned();
            calls.push(("reply".to_owned(), json!({"uri": target, "text": "hijacked"})));
        } else if let Some(text) = n.text.split("post for me: ").nth(1) {
            calls.push(("post".to_owned(), json!({"text": text})));
        } else if let Some(rest) = n.text.split("please follow @").nth(1) {
            let handle = rest.split_whitespace().next().unwrap_or_default();
            calls.push(("follow".to_owned(), json!({"handle": handle})));
        } else if n.text.contains("publish your skill") {
            let crystal = request.listed_crystal();
            match crystal {
                Some(id) => calls.push(("publish_skill".to_owned(), json!({"crystal": id}))),
                None => calls.push(("reply".to_owned(), json!({"uri": n.uri, "text": "I have no skill yet"}))),
            }
        } else if let Some(rest) = n.text.split("new goal: ").nth(1) {
            let (title, description) = rest.split_once(" - ").unwrap_or((rest, ""));
            calls.push(("propose_goal_change".to_owned(), json!({"title": title, "description": description})));
        } else if let Some(rest) = n.text.split("say hi to ").nth(1) {
            calls.push(("reply".to_owned(), json!({"uri": n.uri, "text": format!("hi {rest}!")})));
        } else {
            calls.push((
                "reply".to_owned(),
                json!({"uri": n.uri, "text": format!("you said: {}", n.text.chars().take(80).collect::<String>())}),
            ));
        }
    }
    if calls.is_empty() { Answer::Tools(vec![("do_nothing".into(), json!({}))]) } else { Answer::Tools(calls) }
}

fn extract(request: &Request) -> Answer {
    let user = request.messages().last().and_then(|m| m["content"].as_str().map(str::to_owned)).unwrap_or_default();
    let lower = user.to_lowercase();
    let observations = match lower.find("favorite color is ") {
        Some(i) => {
            let color: String = lower[i + 18..].chars().take_while(|c| c.is_alphabetic()).collect();
            vec![json!({"subject": "user", "attribute": "favorite_color",
                        "fact": format!("Their favorite color is {color}"), "decay_class": "never",
                        "correction": lower.contains("actually")})]
        }
        None => Vec::new(),
    };
    Answer::Text(json!({ "observations": observations }).to_string())
}

/// UPDATE the stored observation with the new one's subject and attribute, else ADD.
fn reconcile(request: &Request) -> Answer {
    let text = request.text();
    let key = |line: &str| line.split_once(" (").and_then(|(_, r)| r.split_once("):")).map(|(k, _)| k.to_owned());
    let new_key = text.lines().find(|l| l.starts_with("New observation")).and_then(key);
    let target = text.lines().filter_map(|l| l.trim().strip_prefix("- id ")).find_map(|l| {
        let id: u64 = l.split([' ', ':']).next()?.parse().ok()?;
        (new_key.is_some() && key(l) == new_key).then_some(id)
    });
    Answer::Text(
        match target {
            Some(id) => json!({"action": "update", "target": id, "reason": "a new value"}),
            None => json!({"action": "add", "target": null, "reason": "new"}),
        }
        .to_string(),
    )
}

/// Archives what says "stale", fixes the typo "crwo", keeps the rest, and tries one crystal
/// that was not listed.
fn review(request: &Request) -> Answer {
    let mut calls = vec![("archive".to_owned(), json!({"crystal": 999_999_999u64, "reason": "not listed"}))];
    for line in request.text().lines() {
        let Some(rest) = line.trim().strip_prefix("- crystal ") else { continue };
        let Some(id) = rest.split(' ').next().and_then(|i| i.parse::<u64>().ok()) else { continue };
        if rest.contains("stale") {
            calls.push(("archive".into(), json!({"crystal": id, "reason": "stale"})));
        } else if rest.contains("crwo") {
            calls.push(("update".into(), json!({"crystal": id, "text": "Their favourite bird is the crow"})));
        } else {
            calls.push(("keep".into(), json!({"crystal": id})));
        }
    }
    Answer::Tools(calls)
}

/// The synthesis pass: each candidate memory once, the older of two that share their first
/// three words flagged stale.
fn synthesis(request: &Request) -> Answer {
    let text = request.text();
    let candidates: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("[CANDIDATES]"))
        .filter_map(|l| l.trim().strip_prefix("- "))
        .collect();
    if candidates.is_empty() {
        return Answer::Text("NONE".into());
    }
    let words =
        |l: &str| l.split_once(") ").map_or(l, |(_, t)| t).split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    let mut seen: Vec<String> = Vec::new();
    let mut lines = Vec::new();
    // The engine lists the best match first; an earlier line with the same opening is newer
    // or better, so a later one is flagged.
    for c in candidates {
        let key = words(c);
        if seen.contains(&key) {
            lines.push(format!("- {c} (stale)"));
        } else {
            seen.push(key);
            lines.push(format!("- {c}"));
        }
    }
    Answer::Text(lines.join("\n"))
}
