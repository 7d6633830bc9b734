//! The `/memory` page as an operator sees it, in real headless Chromium, on a real
//! `druse-node` process holding a few hundred crystals: some corrected (superseded), some in a
//! private namespace. The test asserts on the rendered page's record of what it drew, hovers a
//! crystal, searches through the node's own recall, filters, enters the token, and saves
//! screenshots under `target/` (`memory-page.png`, `memory-page-search.png`).
//!
//! Needs Chromium (`tests/page/setup.sh`); without it the test fails with a clear message when
//! `CI` is set and skips with its reason otherwise.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use druse_tests::browser::{self, Browser, Page};
use druse_tests::page::{self, PRIVATE_WORD};
use serde_json::Value;

/// How long the page may take to draw.
const DRAW: Duration = Duration::from_secs(30);

fn ids(map: &Value) -> Result<Vec<u64>> {
    map["points"]
        .as_array()
        .context("the map has points")?
        .iter()
        .map(|p| p["id"].as_u64().context("a point's id"))
        .collect()
}

/// The map element's `data-*` record.
async fn record(page: &Page<'_>) -> Result<Value> {
    page.eval("Object.assign({}, document.getElementById('map').dataset)").await
}

fn count(record: &Value, key: &str) -> Result<u64> {
    record[key].as_str().and_then(|s| s.parse().ok()).with_context(|| format!("data-{key} in {record}"))
}

/// Waits for a draw after `draws` that left the map in state `drawn` (and the search, when
/// given, in that state), and returns the record.
async fn drawn_after(page: &Page<'_>, draws: u64, search: Option<&str>) -> Result<Value> {
    let search = search.map_or("true".to_owned(), |s| format!("m.dataset.search === '{s}'"));
    let expression = format!(
        "(() => {{ const m = document.getElementById('map'); return m.dataset.state === 'drawn' && \
         Number(m.dataset.draws) > {draws} && {search}; }})()"
    );
    page.wait_for("the map to draw", DRAW, &expression).await?;
    record(page).await
}

#[tokio::test]
async fn the_memory_page_draws_the_map_highlights_recall_and_hides_private_crystals() -> Result<()> {
    druse_tests::init_logging();
    if !browser::available_or_skip("memory_page") {
        return Ok(());
    }
    let root = tempfile::tempdir()?;
    let (node, token) = page::start_node(root.path()).await?;

    let corpus = page::corpus(360);
    let public = page::store(&node.api, &token, &corpus.memories, 200).await?;
    let private = page::store(&node.api, &token, &page::private_memories(40), 200).await?;
    ensure!(corpus.corrections >= 20, "the corpus holds corrections: {}", corpus.corrections);

    // What the API gives a browser without the token, and with it.
    let http = reqwest::Client::new();
    let map: Value = http.get(format!("{}/v1/memory/map", node.api)).send().await?.json().await?;
    let on_map = ids(&map)?;
    let edges = map["edges"].as_array().context("edges")?.len();
    let superseded = map["points"].as_array().context("points")?.iter().filter(|p| p["status"] == "superseded").count();
    ensure!(on_map.len() >= 300, "a few hundred public crystals on the map: {}", on_map.len());
    ensure!(edges >= 10 && superseded == edges, "corrections are edges: {edges} edges, {superseded} superseded");
    ensure!(private.iter().all(|id| !on_map.contains(id)), "no private crystal on the public map");
    ensure!(public.iter().all(|id| on_map.contains(id)), "every public crystal stored is on the map");
    let full: Value = http.get(format!("{}/v1/memory/map", node.api)).bearer_auth(&token).send().await?.json().await?;
    let everything = ids(&full)?;
    ensure!(everything.len() == on_map.len() + private.len(), "the token shows the private crystals too");

    let browser = Browser::launch().await?;
    let page = browser.open(&format!("{}/memory", node.api)).await?;
    let drawn = drawn_after(&page, 0, None).await?;
    ensure!(count(&drawn, "pointsDrawn")? == on_map.len() as u64, "every crystal the API returned is drawn: {drawn}");
    ensure!(count(&drawn, "total")? == on_map.len() as u64, "{drawn}");
    ensure!(count(&drawn, "edgesDrawn")? == edges as u64, "every supersession is drawn as an edge: {drawn}");
    ensure!(count(&drawn, "highlighted")? == 0, "nothing highlighted before a search: {drawn}");
    let text: String = page.eval("document.body.innerText").await?.as_str().unwrap_or_default().to_owned();
    ensure!(!text.contains(PRIVATE_WORD), "the page shows nothing private without the token");
    ensure!(text.contains("public memories only"), "the page says what it leaves out without the token");
    let private_drawn =
        page.eval(&format!("{:?}.filter(id => window.druseMemory.screenPoint(id) !== null).length", private)).await?;
    ensure!(private_drawn == 0, "no private crystal is on the page: {private_drawn}");

    // Hover a crystal: its details show in the tooltip.
    let target = isolated_point(&page, &on_map).await?;
    let point = map["points"].as_array().context("points")?.iter().find(|p| p["id"] == target.0).context("target")?;
    page.mouse_move(target.1, target.2).await?;
    page.wait_for("the tooltip", DRAW, &format!("document.getElementById('tooltip').dataset.id === '{}'", target.0))
        .await?;
    let tooltip = page
        .eval("(() => { const t = document.getElementById('tooltip'); return { hidden: t.hidden, text: t.querySelector('.tt-text').textContent, \
               importance: t.querySelector('[data-field=importance]').textContent, decay: t.querySelector('[data-field=decay_class]').textContent, \
               age: t.querySelector('[data-field=age]').textContent }; })()")
        .await?;
    ensure!(tooltip["hidden"] == false, "{tooltip}");
    ensure!(tooltip["text"] == point["text"], "the tooltip shows the crystal's text: {tooltip} vs {point}");
    let decay = point["decay_class"].as_str().context("decay class")?.replace('_', " ");
    ensure!(tooltip["decay"] == decay.as_str(), "the tooltip shows the decay class: {tooltip}");
    let importance = point["importance"].as_f64().context("importance")?;
    ensure!(
        tooltip["importance"].as_str().is_some_and(|s| s.contains(&format!("{importance:.3}"))),
        "the tooltip shows the importance: {tooltip}"
    );
    ensure!(tooltip["age"].as_str().is_some_and(|s| s.ends_with(" s") || s.ends_with(" min")), "{tooltip}");
    page.screenshot(&browser::target_dir()?.join("memory-page.png")).await?;

    // Search through the node's own recall: the hits it answers are highlighted.
    let query = "sailing harbour regatta";
    let recalled: Value =
        http.get(format!("{}/v1/memories", node.api)).query(&[("q", query), ("k", "100")]).send().await?.json().await?;
    let recalled: HashSet<u64> =
        recalled.as_array().context("hits")?.iter().filter_map(|h| h["crystal"]["id"].as_u64()).collect();
    ensure!(!recalled.is_empty(), "recall finds the sailing crystals");
    let before = count(&record(&page).await?, "draws")?;
    page.type_into("#search", query).await?;
    page.press_enter().await?;
    let searched = drawn_after(&page, before, Some("done")).await?;
    let highlighted: HashSet<u64> =
        searched["hitIds"].as_str().context("data-hit-ids")?.split(',').filter_map(|id| id.parse().ok()).collect();
    ensure!(highlighted == recalled, "the page highlights what the node recalls: {highlighted:?} vs {recalled:?}");
    ensure!(count(&searched, "highlighted")? == recalled.len() as u64, "every hit is drawn highlighted: {searched}");
    let hit_texts = page.eval("JSON.stringify(document.getElementById('search-status').textContent)").await?;
    ensure!(hit_texts.as_str().is_some_and(|s| s.contains("recalled")), "{hit_texts}");
    page.screenshot(&browser::target_dir()?.join("memory-page-search.png")).await?;

    // Filters: hiding superseded crystals hides them and their edges.
    let before = count(&searched, "draws")?;
    page.eval("document.querySelector('#filter-status input[data-value=superseded]').click()").await?;
    let filtered = drawn_after(&page, before, None).await?;
    ensure!(count(&filtered, "pointsDrawn")? == (on_map.len() - superseded) as u64, "{filtered}");
    ensure!(count(&filtered, "edgesDrawn")? == 0, "no edge without its superseded end: {filtered}");
    page.eval("document.querySelector('#filter-status input[data-value=superseded]').click()").await?;

    // The token, typed into the page, shows the private crystals as well.
    page.type_into("#token", &token).await?;
    page.press_enter().await?;
    let all = everything.len();
    let expression = format!(
        "(() => {{ const m = document.getElementById('map'); return m.dataset.state === 'drawn' && m.dataset.total === '{all}'; }})()"
    );
    page.wait_for("the map with the token", DRAW, &expression).await?;
    let with_token = record(&page).await?;
    ensure!(count(&with_token, "pointsDrawn")? == all as u64, "private crystals drawn with the token: {with_token}");
    let kept = page.eval("sessionStorage.getItem('druse.token') !== null").await?;
    ensure!(kept == true, "the token is kept for the tab");
    Ok(())
}

/// A crystal on the map with no other within 14 px of it, and where it is drawn.
async fn isolated_point(page: &Page<'_>, ids: &[u64]) -> Result<(u64, f64, f64)> {
    let positions =
        page.eval(&format!("JSON.stringify({ids:?}.map(id => [id, window.druseMemory.screenPoint(id)]))")).await?;
    let positions: Vec<(u64, Option<Value>)> = serde_json::from_str(positions.as_str().context("positions")?)?;
    let points: Vec<(u64, f64, f64)> = positions
        .into_iter()
        .filter_map(|(id, p)| Some((id, p.as_ref()?["x"].as_f64()?, p.as_ref()?["y"].as_f64()?)))
        .collect();
    points
        .iter()
        .find(|(id, x, y)| {
            points.iter().all(|(other, ox, oy)| other == id || (ox - x).hypot(oy - y) > 14.0)
                && *x > 350.0
                && *y > 120.0
        })
        .copied()
        .context("no crystal stands alone on the map")
}
