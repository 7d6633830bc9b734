use std::os::unix::fs::PermissionsExt;

use super::*;

/// An executable shell script in `dir`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn spec(dir: &Path, named: Option<PathBuf>) -> Spec {
    Spec { model: dir.join("model.gguf"), named, port: free_port().unwrap(), context: 4096 }
}

#[tokio::test]
async fn a_named_server_is_used_as_given() {
    let named = PathBuf::from("/opt/llama/llama-server");
    assert_eq!(find(Some(&named)).await, Ok(Server::Binary(named)));
}

#[test]
fn the_server_is_told_the_model_the_loopback_port_and_the_context() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), None);
    let binary = command(&Server::Binary("llama-server".into()), &spec, 7);
    let args: Vec<String> = binary.as_std().get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    let port = spec.port.to_string();
    let model = spec.model.display().to_string();
    assert_eq!(
        args,
        ["--model", &model, "--host", "127.0.0.1", "--port", &port, "--ctx-size", "4096", "--jinja"],
        "llama-server on loopback only, with the chat template's tool calls"
    );
    let python = command(&Server::Python("python3".into()), &spec, 7);
    let args: Vec<String> = python.as_std().get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    assert_eq!(args[0], "-c");
    assert!(args[1].contains("xllamacpp.Server") && args[1].contains("127.0.0.1"), "{}", args[1]);
    assert_eq!(args[2..], [model, port, "4096".into(), "7".into()], "the launcher watches its parent, the node");
}

#[tokio::test]
async fn no_server_anywhere_is_a_clear_error_at_once() {
    let (tx, rx) = watch::channel(State::Starting);
    let model = LocalModel { base_url: String::new(), state: rx };
    tx.send(State::Down(NOT_FOUND.into())).unwrap();
    let why = model.ready(Duration::from_secs(600)).await.unwrap_err();
    assert!(why.contains("pip install xllamacpp") && why.contains("llama_server"), "{why}");
}

#[tokio::test]
async fn a_server_that_dies_is_started_again_with_a_backoff_and_its_last_words_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let broken = script(dir.path(), "llama-server", "echo \"error: model file is corrupt: $2\" >&2\nexit 3");
    let spec = spec(dir.path(), Some(broken));
    let (tx, mut rx) = watch::channel(State::Starting);
    let metrics = Metrics::default();
    let supervisor = tokio::spawn(supervise(spec, tx, metrics.clone()));
    let why = tokio::time::timeout(Duration::from_secs(30), async {
        rx.wait_for(|s| matches!(s, State::Down(_))).await.map(|s| describe(&s)).unwrap()
    })
    .await
    .expect("the death is seen");
    assert!(why.contains("exit status: 3") && why.contains("model file is corrupt"), "{why}");
    assert!(why.contains("model.gguf"), "the server was given the model: {why}");
    // Started again, after 1 s, then 2 s: a second death is counted too.
    tokio::time::timeout(Duration::from_secs(30), async {
        while metrics.local_model_restarts.get() < 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the server is started again");
    let model = LocalModel { base_url: String::new(), state: rx };
    let waited = model.ready(Duration::from_millis(200)).await.unwrap_err();
    assert!(waited.contains("did not answer within"), "a dying server is not ready: {waited}");
    supervisor.abort();
}
