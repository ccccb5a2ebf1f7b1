//! The CLI with a projector, as llama-mtmd-cli: `-p PROMPT --image FILE...` on the synthetic
//! LLaVA pair gives llama-mtmd-cli's greedy text (tests/data/vision/cli.json, made by
//! tools/vision-cli-reference.sh), with the image before the text, at the `<__media__>`
//! marker, and twice; `--chat` takes `/image PATH`; bad images, projectors and contexts end
//! the run with one line and exit status 1.

mod common;

use std::path::PathBuf;

use common::llava;

struct Files {
    text: String,
    mmproj: String,
    picture: String,
    dir: PathBuf,
}

fn files(tag: &str) -> Option<Files> {
    let (text, mmproj) = llava::pair()?;
    let dir =
        std::env::temp_dir().join(format!("llamafile-vision-cli-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let picture = dir.join("picture.png");
    std::fs::write(&picture, llava::picture_png(84, 84)).unwrap();
    Some(Files {
        text: text.to_str().unwrap().into(),
        mmproj: mmproj.to_str().unwrap().into(),
        picture: picture.to_str().unwrap().into(),
        dir,
    })
}

fn greedy<'a>(f: &'a Files, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "-m", &f.text, "--mmproj", &f.mmproj, "-n", "12", "--temp", "0",
    ];
    a.extend(["--chat-template", "vicuna"]);
    a.extend(extra);
    a
}

#[test]
fn greedy_text_matches_llama_mtmd_cli() {
    let Some(f) = files("greedy") else { return };
    for (prompt, n_images, want) in llava::cli_cases() {
        let mut extra = vec!["-p", prompt.as_str()];
        for _ in 0..n_images {
            extra.extend(["--image", f.picture.as_str()]);
        }
        let out = common::llamafile(&greedy(&f, &extra));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{prompt:?}: {stderr}");
        let got = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            got.trim_matches('\n'),
            want,
            "{prompt:?} with {n_images} images"
        );
    }
    // `--chat`: `/image PATH` then the question is the same first turn.
    let input = format!("/image {}\nDescribe.\n", f.picture);
    let out = common::llamafile_with_input(&greedy(&f, &["--chat"]), input.as_bytes());
    let got = String::from_utf8_lossy(&out.stdout);
    assert!(got.contains("image loaded"), "{got}");
    assert!(got.contains(&llava::cli_cases()[0].2), "{got}");
    std::fs::remove_dir_all(&f.dir).ok();
}

#[test]
fn bad_images_and_projectors_are_one_line() {
    let Some(f) = files("bad") else { return };
    let d = &f.dir;
    let png = llava::picture_png(84, 84);
    std::fs::write(d.join("trunc.png"), &png[..png.len() / 3]).unwrap();
    std::fs::write(d.join("text.png"), b"not an image\n").unwrap();
    std::fs::write(d.join("huge.png"), llava::huge_png()).unwrap();
    let path = |n: &str| d.join(n).to_str().unwrap().to_string();
    let (missing, trunc, text) = (path("missing.png"), path("trunc.png"), path("text.png"));
    let huge = path("huge.png");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--image", &missing], "cannot read image"),
        (vec!["--image", &trunc], "corrupt or truncated png"),
        (vec!["--image", &text], "unknown image format"),
        (vec!["--image", &huge], "9000×10 pixels is larger than"),
        (
            vec!["--image", &f.picture, "-c", "30"],
            "more than the context",
        ),
    ];
    for (extra, needle) in cases {
        let mut args = greedy(&f, &extra);
        args.extend(["-p", "Describe."]);
        let out = common::llamafile(&args);
        common::assert_one_line_error(&out, needle);
        assert_eq!(out.status.code(), Some(1), "{extra:?}");
    }
    // A projector for another width, a text model as the projector, and no projector at all.
    if let Some(smol) = common::model_path("SmolLM2-135M-Instruct.Q4_1") {
        let smol = smol.to_str().unwrap();
        let wrong = [
            (
                vec!["-m", smol, "--mmproj", &f.mmproj],
                "not for this model",
            ),
            (vec!["-m", &f.text, "--mmproj", smol], "expected 'clip'"),
            (vec!["-m", &f.text], "no projector"),
        ];
        for (mut args, needle) in wrong {
            args.extend(["--image", &f.picture, "-p", "hi"]);
            let out = common::llamafile(&args);
            common::assert_one_line_error(&out, needle);
            assert_eq!(out.status.code(), Some(1), "{args:?}");
        }
    }
    let out = common::llamafile(&greedy(&f, &["--audio", "a.wav", "-p", "hi"]));
    common::assert_one_line_error(&out, "audio input is not built");
    std::fs::remove_dir_all(&f.dir).ok();
}

/// packaging/make-llamafile.sh with `--mmproj`: the projector packed beside the model, `.args`
/// naming both, and the llamafile reading an image as the loose files do, on the command line
/// and as a server.
#[test]
fn a_packed_llamafile_reads_images() {
    let Some(f) = files("packed") else { return };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/make-llamafile.sh");
    let out = f.dir.join("llava.llamafile");
    let made = std::process::Command::new("bash")
        .arg(script)
        .arg(&f.text)
        .arg(&out)
        .args(["--mmproj", &f.mmproj, "--", "--chat-template", "vicuna"])
        .env("LLAMAFILE_BIN", env!("CARGO_BIN_EXE_llamafile"))
        .env("ZIPALIGN_BIN", env!("CARGO_BIN_EXE_zipalign"))
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    // Run from elsewhere: the model and the projector can only come from the ZIP.
    let run = std::process::Command::new(&out)
        .args(["--image", &f.picture, "-p", "Describe.", "-n", "12"])
        .args(["--temp", "0"])
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let got = String::from_utf8_lossy(&run.stdout);
    assert_eq!(got.trim_matches('\n'), llava::cli_cases()[0].2);
    // And as a server: one chat request with the picture as an image_url part.
    let mut srv = std::process::Command::new(&out)
        .args(["--server", "--nobrowser", "--port", "0", "-t", "2"])
        .current_dir(std::env::temp_dir())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let stdout = srv.stdout.take().unwrap();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
    let port: u16 = line
        .split("http://127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no URL in {line:?}"));
    let png = std::fs::read(&f.picture).unwrap();
    let body = common::image_chat::ask(&common::image_chat::data_url(&png), "Describe.");
    let reply = common::http::post(port, "/v1/chat/completions", &body);
    srv.kill().ok();
    srv.wait().ok();
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let text = &reply.json()["choices"][0]["message"]["content"];
    assert_eq!(text, &serde_json::json!(llava::cli_cases()[0].2));
    std::fs::remove_dir_all(&f.dir).ok();
}
