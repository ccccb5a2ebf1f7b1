//! `/props` `chat_template_caps`: what each test model's chat template can take, as llama-server
//! reports it (recorded by tools/make-server-shape-refs.py in
//! tests/data/server/chat-template-caps.json).

use super::get;
use crate::common::server::start_model;
use serde_json::Value;

fn recorded() -> Value {
    serde_json::from_str(include_str!("../data/server/chat-template-caps.json")).unwrap()
}

#[test]
fn chat_template_caps_as_llama_server() {
    let models = recorded()["models"].clone();
    let models = models.as_object().unwrap();
    assert_eq!(models.len(), 3);
    for (file, want) in models {
        let stem = file.trim_end_matches(".gguf");
        let Some(srv) = start_model(stem, &["-c", "256", "-np", "1"]) else {
            continue;
        };
        let props = get(srv.port, "/props").json();
        assert_eq!(&props["chat_template_caps"], want, "{file}");
    }
}
