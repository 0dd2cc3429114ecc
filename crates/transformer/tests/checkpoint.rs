//! Checkpoints: round trip with layout names and metadata, atomic writes, clear errors on mismatched
//! configs and on truncated or corrupt files (never a panic).

mod common;

use common::TestDir;
use transformer::checkpoint::{self, Checkpoint};
use transformer::{Error, ModelConfig, Positions, Transformer};

fn cfg() -> ModelConfig {
    ModelConfig {
        n_layers: 1,
        d_model: 8,
        d_ff: 16,
        n_heads: 2,
        d_k: 4,
        d_v: 4,
        dropout: 0.1,
        attention_dropout: 0.0,
        label_smoothing: 0.1,
        positions: Positions::Learned,
        max_positions: 16,
        vocab_size: 20,
        layer_norm_eps: 1e-6,
        ..transformer::ModelConfig::base()
    }
}

fn tmpdir(name: &str) -> TestDir {
    TestDir::new(&format!("transformer-ckpt-{name}"))
}

fn sample() -> Checkpoint {
    let model = Transformer::new(cfg(), 3).unwrap();
    let n = model.params.len();
    Checkpoint {
        config: cfg(),
        step: 1234,
        vocab_hash: "sha256:abc".into(),
        params: model.params,
        adam: Some(((0..n).map(|i| i as f32 * 1e-3).collect(), (0..n).map(|i| i as f32 * 1e-6).collect())),
        extra: [("trainer".to_string(), "{\"seed\":5}".to_string())].into_iter().collect(),
    }
}

#[test]
fn round_trip_keeps_everything() {
    let dir = tmpdir("roundtrip");
    let path = dir.join("model.safetensors");
    let ck = sample();
    checkpoint::save(&path, &ck).unwrap();
    let back = checkpoint::load(&path).unwrap();
    assert_eq!(back, ck);
    // Tensors carry the layout's names and shapes.
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.tensor("decoder.layers.0.cross_attn.w_q").unwrap().shape(), &[8, 8]);
    assert_eq!(st.tensor("embed.positions").unwrap().shape(), &[16, 8]);
    // No temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn mismatched_config_names_both_values() {
    let dir = tmpdir("mismatch");
    let path = dir.join("m.safetensors");
    checkpoint::save(&path, &sample()).unwrap();
    let mut other = cfg();
    other.d_ff = 32;
    let err = checkpoint::load_for(&path, &other).unwrap_err();
    assert!(matches!(err, Error::CheckpointMismatch { .. }));
    let msg = err.to_string();
    assert!(msg.contains("d_ff") && msg.contains("32") && msg.contains("16"), "{msg}");
    assert!(msg.contains("m.safetensors"), "{msg}");
}

/// A directory where a checkpoint file belongs (`--init run/`): named as a directory, with the
/// checkpoint inside it suggested, not "shorter than 8 bytes" (the audit's probe).
#[test]
fn a_directory_given_as_a_checkpoint_is_named_as_such() {
    let dir = tmpdir("a-directory");
    let run = dir.join("run");
    std::fs::create_dir_all(&run).unwrap();
    let e = checkpoint::load(&run).unwrap_err().to_string();
    assert!(e.contains("a directory, not a checkpoint file") && !e.contains("8 bytes"), "{e}");
    checkpoint::save(&run.join("model.safetensors"), &sample()).unwrap();
    for e in [checkpoint::load(&run).unwrap_err().to_string(), checkpoint::read_config(&run).unwrap_err().to_string()] {
        assert!(e.contains("did you mean") && e.contains("model.safetensors"), "{e}");
    }
}

#[test]
fn truncated_or_corrupt_files_are_errors_not_panics() {
    let dir = tmpdir("corrupt");
    let good = dir.join("good.safetensors");
    checkpoint::save(&good, &sample()).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("header only", bytes[..8].to_vec()),
        ("truncated header", bytes[..40].to_vec()),
        ("truncated data", bytes[..bytes.len() - 100].to_vec()),
        ("half", bytes[..bytes.len() / 2].to_vec()),
        ("garbage", (0..5000u32).map(|i| (i * 7919 % 251) as u8).collect()),
        ("huge header length", {
            let mut b = bytes.clone();
            b[..8].copy_from_slice(&u64::MAX.to_le_bytes());
            b
        }),
        ("corrupt json", {
            let mut b = bytes.clone();
            b[9] = b'#';
            b
        }),
    ];
    for (what, data) in cases {
        let p = dir.join(format!("{}.safetensors", what.replace(' ', "_")));
        std::fs::write(&p, &data).unwrap();
        let err = checkpoint::load(&p).expect_err(what);
        assert!(matches!(err, Error::CorruptCheckpoint { .. }), "{what}: {err}");
        assert!(err.to_string().contains(&p.display().to_string()), "{what}: {err}");
    }
    let missing = checkpoint::load(&dir.join("nope.safetensors")).unwrap_err();
    assert!(matches!(missing, Error::Io { .. }) && missing.to_string().contains("nope.safetensors"));
}

#[test]
fn foreign_safetensors_and_wrong_shapes_are_refused() {
    let dir = tmpdir("foreign");
    // A valid safetensors file that is not ours.
    let data = vec![0u8; 16];
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![4], &data).unwrap();
    let p = dir.join("foreign.safetensors");
    std::fs::write(&p, safetensors::tensor::serialize([("x", view)], &None).unwrap()).unwrap();
    let err = checkpoint::load(&p).unwrap_err().to_string();
    assert!(err.contains("format"), "{err}");
    // Ours, but the metadata config does not fit the tensors.
    let good = dir.join("good.safetensors");
    checkpoint::save(&good, &sample()).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let text = String::from_utf8_lossy(&bytes[..2000]).to_string();
    assert!(text.contains("\\\"d_ff\\\":16"));
    let hacked: Vec<u8> = {
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header = String::from_utf8(bytes[8..8 + n].to_vec()).unwrap().replace("\\\"d_ff\\\":16", "\\\"d_ff\\\":15");
        assert_eq!(header.len(), n);
        [&bytes[..8], header.as_bytes(), &bytes[8 + n..]].concat()
    };
    let p = dir.join("hacked.safetensors");
    std::fs::write(&p, hacked).unwrap();
    let err = checkpoint::load(&p).unwrap_err().to_string();
    assert!(err.contains("ffn.w_1") && err.contains("[15, 8]"), "{err}");
}

/// A config in the metadata that implies a huge model is refused before anything is allocated.
#[test]
fn huge_config_in_metadata_is_refused_without_allocating() {
    let dir = tmpdir("huge");
    let good = dir.join("good.safetensors");
    checkpoint::save(&good, &sample()).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = String::from_utf8(bytes[8..8 + n].to_vec()).unwrap();
    for (from, to, why) in [
        ("\\\"vocab_size\\\":20", "\\\"vocab_size\\\":9999999", "but the file has"),
        ("\\\"vocab_size\\\":20", "\\\"vocab_size\\\":99999999", "exceeds the supported maximum"),
        ("\\\"max_positions\\\":16", "\\\"max_positions\\\":99999999", "exceeds the supported maximum"),
    ] {
        assert!(header.contains(from), "{from}");
        let hacked = header.replace(from, to);
        // Keep the header length: pad with spaces (valid JSON whitespace) or skip if longer.
        let padded = format!("{hacked:<n$}");
        if padded.len() != n {
            let mut b = (padded.len() as u64).to_le_bytes().to_vec();
            b.extend_from_slice(padded.as_bytes());
            b.extend_from_slice(&bytes[8 + n..]);
            std::fs::write(dir.join("h.safetensors"), b).unwrap();
        } else {
            std::fs::write(dir.join("h.safetensors"), [&bytes[..8], padded.as_bytes(), &bytes[8 + n..]].concat())
                .unwrap();
        }
        let err = checkpoint::load(&dir.join("h.safetensors")).unwrap_err();
        assert!(matches!(err, Error::CorruptCheckpoint { .. }), "{err}");
        assert!(err.to_string().contains(why), "{why}: {err}");
    }
}

#[test]
fn atomic_write_replaces_whole_file() {
    let dir = tmpdir("atomic");
    let path = dir.join("c.safetensors");
    let mut ck = sample();
    checkpoint::save(&path, &ck).unwrap();
    ck.step = 99;
    checkpoint::save(&path, &ck).unwrap();
    assert_eq!(checkpoint::load(&path).unwrap().step, 99);
    // Writing into a directory that does not exist fails cleanly and leaves nothing behind.
    let err = checkpoint::save(&dir.join("missing/c.safetensors"), &ck).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
}

#[test]
fn averaging_is_the_elementwise_mean_and_refuses_mismatches() {
    let dir = tmpdir("average");
    let mut a = sample();
    let mut b = sample();
    for (i, (x, y)) in a.params.iter_mut().zip(b.params.iter_mut()).enumerate() {
        *x = i as f32;
        *y = 3.0 * i as f32 + 1.0;
    }
    b.step = 2000;
    let (pa, pb) = (dir.join("a.safetensors"), dir.join("b.safetensors"));
    checkpoint::save(&pa, &a).unwrap();
    checkpoint::save(&pb, &b).unwrap();
    let avg = checkpoint::average(&[pa.clone(), pb.clone()]).unwrap();
    assert_eq!(avg.step, 2000);
    assert!(avg.adam.is_none());
    assert!(avg.params.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32 + 0.5), "mean of i and 3i+1");
    // A different configuration is refused, naming the field and both values.
    let mut c = sample();
    c.config.d_ff = 32;
    c.params = transformer::Transformer::new(c.config.clone(), 1).unwrap().params;
    c.adam = None;
    let pc = dir.join("c.safetensors");
    checkpoint::save(&pc, &c).unwrap();
    let err = checkpoint::average(&[pa.clone(), pc]).unwrap_err().to_string();
    assert!(err.contains("c.safetensors") && err.contains("d_ff") && err.contains("16") && err.contains("32"), "{err}");
    // So is a different vocabulary.
    let mut d = sample();
    d.vocab_hash = "sha256:other".into();
    let pd = dir.join("d.safetensors");
    checkpoint::save(&pd, &d).unwrap();
    let err = checkpoint::average(&[pa.clone(), pd]).unwrap_err().to_string();
    assert!(err.contains("d.safetensors") && err.contains("vocabulary") && err.contains("sha256:other"), "{err}");
    // Tree formats: a parsing checkpoint without the key (written before it existed) is
    // tags+words, so it averages with one that says so and keeps the format; `tags` is refused.
    let key = checkpoint::TREE_FORMAT_KEY.to_string();
    let with = |name: &str, format: &str| {
        let mut e = sample();
        e.extra.insert(key.clone(), format.into());
        let p = dir.join(name);
        checkpoint::save(&p, &e).unwrap();
        p
    };
    let (tw, tags) = (with("tw.safetensors", "tags+words"), with("tags.safetensors", "tags"));
    let avg = checkpoint::average(&[pa.clone(), tw.clone()]).unwrap();
    assert_eq!(avg.extra.get(&key), None, "the first file's metadata is kept: no key, tags+words");
    let avg = checkpoint::average(&[tw.clone(), pa.clone()]).unwrap();
    assert_eq!(avg.extra.get(&key).map(String::as_str), Some("tags+words"));
    let err = checkpoint::average(&[pa, tags.clone()]).unwrap_err().to_string();
    assert!(err.contains("tags.safetensors") && err.contains("tree format"), "{err}");
    let avg = checkpoint::average(&[tags.clone(), tags]).unwrap();
    assert_eq!(avg.extra.get(&key).map(String::as_str), Some("tags"));
}

#[test]
fn run_dir_is_locked_for_one_run_and_a_stale_lock_is_taken_over() {
    use transformer::train::run_dir::RunDir;
    let dir = tmpdir("run-lock");
    let mut lines = Vec::new();
    let first =
        RunDir::open(&dir, 3, &mut transformer::events::Lines::new(|l: &str| lines.push(l.to_string()))).unwrap();
    assert!(lines.is_empty(), "{lines:?}");
    // A second opener (here the same process, through another file handle) is refused, naming the
    // directory and the holder.
    let err = RunDir::open(&dir, 3, &mut ()).err().expect("the directory is locked").to_string();
    let pid = std::process::id().to_string();
    assert!(err.contains(&*dir.to_string_lossy()) && err.contains(&format!("pid {pid}")), "{err}");
    assert!(matches!(RunDir::open(&dir, 3, &mut ()), Err(Error::RunDirLocked { .. })));
    drop(first);
    assert!(!dir.join(".lock").exists(), "the lock is released and removed when the run ends");
    // A lock file left by a killed run (its pid gone, its flock released by the kernel) is stale.
    std::fs::write(dir.join(".lock"), "4194999 some-host\n").unwrap();
    let _again =
        RunDir::open(&dir, 3, &mut transformer::events::Lines::new(|l: &str| lines.push(l.to_string()))).unwrap();
    assert!(lines.iter().any(|l| l.contains("stale lock") && l.contains("4194999")), "{lines:?}");
    assert!(std::fs::read_to_string(dir.join(".lock")).unwrap().starts_with(&format!("{pid} ")));
}

#[test]
fn crash_recovery_removes_only_temp_files_of_dead_writers() {
    use transformer::train::run_dir::RunDir;
    let dir = tmpdir("run-recovery");
    let live = std::os::unix::process::parent_id(); // the test harness's parent: alive
    let (dead, mine) = (4194999, std::process::id());
    let temp = |pid: u32| dir.join(format!(".ckpt-00000007.safetensors.tmp.{pid}.0"));
    for pid in [live, dead, mine] {
        std::fs::write(temp(pid), b"partial").unwrap();
    }
    let other = dir.join("notes.tmp.1.0");
    std::fs::write(&other, b"not ours").unwrap();
    // The temporary files of the directory's other atomic writes are orphans too.
    let orphans = [".best.safetensors.tmp.4194999.3", ".metrics.jsonl.tmp.4194999.0", ".vocab.json.tmp.4194999.1"];
    for name in orphans {
        std::fs::write(dir.join(name), b"partial").unwrap();
    }
    let _run = RunDir::open(&dir, 3, &mut ()).unwrap();
    assert!(temp(live).exists(), "a live process's temp file is left alone");
    assert!(!temp(dead).exists() && !temp(mine).exists(), "a dead writer's temp files are removed");
    assert!(orphans.iter().all(|n| !dir.join(n).exists()), "every orphan temp file is removed");
    assert!(other.exists(), "only our temp files (.NAME.tmp.PID.N) are touched");
}

#[test]
fn metrics_after_the_resumed_step_are_dropped() {
    use transformer::train::run_dir::RunDir;
    let dir = tmpdir("run-metrics");
    let run = RunDir::open(&dir, 3, &mut ()).unwrap();
    for step in 1..=5u64 {
        run.append_metrics(&serde_json::json!({"kind": "train", "step": step})).unwrap();
    }
    // A line with a bad byte and a garbage ASCII line (a crash mid-write on some filesystems).
    let path = dir.join("metrics.jsonl");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"kind\":\"train\",\"st\xffep\":6}\ngarbage\n");
    std::fs::write(&path, &bytes).unwrap();
    let mut log = Vec::new();
    assert_eq!(
        run.drop_metrics_after(3, &mut transformer::events::Lines::new(|m: &str| log.push(m.to_string()))).unwrap(),
        2
    );
    assert_eq!(run.drop_metrics_after(3, &mut ()).unwrap(), 0);
    assert!(log.len() == 2 && log[0].contains("metrics.jsonl:6:") && log[1].contains("metrics.jsonl:7:"), "{log:?}");
    let text = std::fs::read_to_string(&path).unwrap();
    let steps: Vec<u64> =
        text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [1, 2, 3]);
    let aside = std::fs::read(dir.join("metrics.jsonl.damaged")).unwrap();
    assert_eq!(aside, b"{\"kind\":\"train\",\"st\xffep\":6}\ngarbage\n");
    run.write_learning_curve().unwrap();
}

/// A checkpoint whose tensor data changed after it was written (one flipped byte) is refused with
/// its checksum, and a resume passes over it to the one before.
#[test]
fn a_damaged_checkpoint_fails_its_checksum() {
    let dir = tmpdir("crc");
    let cfg = cfg();
    let model = Transformer::new(cfg.clone(), 1).unwrap();
    let ckpt = transformer::checkpoint::Checkpoint {
        config: cfg,
        step: 7,
        vocab_hash: String::new(),
        params: model.params.clone(),
        adam: None,
        extra: Default::default(),
    };
    let path = dir.join("ckpt-00000007.safetensors");
    transformer::checkpoint::save(&path, &ckpt).unwrap();
    assert_eq!(transformer::checkpoint::load(&path).unwrap().params, ckpt.params);
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 3; // inside the last tensor's data
    bytes[last] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    let err = transformer::checkpoint::load(&path).unwrap_err().to_string();
    assert!(err.contains("ckpt-00000007.safetensors") && err.contains("CRC-32") && err.contains("damaged"), "{err}");
}

#[test]
fn int8_checkpoints_round_trip_decode_alike_and_are_refused_where_f32_is_needed() {
    use transformer::Precision;
    let dir = tmpdir("int8");
    let src = dir.join("f32.safetensors");
    let dst = dir.join("int8.safetensors");
    let ckpt = sample();
    checkpoint::save(&src, &ckpt).unwrap();
    let (before, after) = checkpoint::quantize(&src, &dst).unwrap();
    assert!(after < before, "{after} bytes against {before}: no Adam moments, codes a quarter of f32");
    assert!(checkpoint::read_header(&dst).unwrap().int8 && !checkpoint::read_header(&src).unwrap().int8);
    let (loaded, codes) = checkpoint::load_int8(&dst).unwrap();
    assert_eq!((loaded.step, &loaded.vocab_hash, &loaded.extra), (ckpt.step, &ckpt.vocab_hash, &ckpt.extra));
    assert!(loaded.adam.is_none());
    // The codes are the ones quantising at load gives, so both models compute alike.
    let at_load = Transformer::from_params(cfg(), ckpt.params.clone()).unwrap().prepare(Precision::Int8).unwrap();
    assert_eq!(at_load.prepared().unwrap().codes(&at_load.config).unwrap(), codes);
    let from_file = Transformer::from_params(cfg(), loaded.params.clone()).unwrap().with_int8_codes(&codes).unwrap();
    let batch = transformer::Batch::from_pairs(&[(vec![4, 5, 6], vec![7, 8]), (vec![9], vec![10, 11, 12])]);
    let (mut w1, mut w2) = (transformer::Workspace::new(), transformer::Workspace::new());
    at_load.forward(&batch, &mut w1, None).unwrap();
    from_file.forward(&batch, &mut w2, None).unwrap();
    assert_eq!(w1.logits, w2.logits);
    // The linear maps' f32 weights are not in the file: such a model stays at int8.
    let e = from_file.prepare(Precision::F32).unwrap_err().to_string();
    assert!(e.contains("int8 checkpoint") && e.contains("not f32"), "{e}");
    // The f32 loader (train, resume, average) refuses it by name.
    let e = checkpoint::load(&dst).unwrap_err().to_string();
    assert!(e.contains("int8.safetensors is an int8 checkpoint") && e.contains("f32 checkpoint"), "{e}");
    // A damaged byte fails the checksum.
    let mut bytes = std::fs::read(&dst).unwrap();
    let last = bytes.len() - 3;
    bytes[last] ^= 0x10;
    std::fs::write(&dst, &bytes).unwrap();
    let e = checkpoint::load_int8(&dst).unwrap_err().to_string();
    assert!(e.contains("CRC-32") && e.contains("damaged"), "{e}");
    // Codes for a tensor that is not a linear map's weight are refused by name.
    let mut stray = codes.clone();
    stray.insert("encoder.layers.0.ffn_norm.gamma".into(), (vec![1; 8], vec![0.1]));
    let e = Transformer::from_params(cfg(), loaded.params.clone())
        .unwrap()
        .with_int8_codes(&stray)
        .unwrap_err()
        .to_string();
    assert!(e.contains("encoder.layers.0.ffn_norm.gamma") && e.contains("not a linear map"), "{e}");
    // Codes that do not cover a linear map are a mismatch, not a panic.
    let mut partial = codes.clone();
    let first = partial.keys().next().unwrap().clone();
    partial.remove(&first);
    let e = Transformer::from_params(cfg(), loaded.params).unwrap().with_int8_codes(&partial).unwrap_err().to_string();
    assert!(e.contains(&first), "{e}");
}

/// Loading straight into a model prepared for inference, tensor by tensor, gives the model that
/// loading whole and preparing gives, at every precision; the checksum covers every tensor it
/// reads and the Adam moments it skips.
#[test]
fn a_checkpoint_loads_prepared_as_loading_then_preparing_does() {
    use transformer::model::DecoderKernels;
    use transformer::Precision;
    let dir = tmpdir("prepared");
    let path = dir.join("ckpt.safetensors");
    let mut ckpt = sample();
    let mut rng = transformer::rng::Rng::new(4);
    for p in &mut ckpt.params {
        *p += (rng.uniform() as f32 - 0.5) * 0.5;
    }
    checkpoint::save(&path, &ckpt).unwrap();
    let batch = transformer::Batch::from_pairs(&[(vec![4, 5, 6], vec![7, 8]), (vec![9], vec![10, 11, 12])]);
    for p in Precision::ALL.into_iter().filter(|p| p.available().is_ok()) {
        for kernels in [DecoderKernels::Packed, DecoderKernels::Gemm] {
            let (meta, streamed) = checkpoint::load_prepared(&path, p, kernels).unwrap();
            assert_eq!((meta.step, &meta.vocab_hash, &meta.extra), (ckpt.step, &ckpt.vocab_hash, &ckpt.extra));
            assert!(meta.params.is_empty() && meta.adam.is_none());
            let whole = Transformer::from_params(cfg(), ckpt.params.clone()).unwrap().prepare_with(p, kernels).unwrap();
            assert_eq!(streamed.params, whole.params, "{p} {kernels:?}");
            assert_eq!(streamed.layout.entries(), whole.layout.entries(), "{p} {kernels:?}");
            assert_eq!(streamed.prepared().unwrap().bytes(), whole.prepared().unwrap().bytes());
            let (mut w1, mut w2) = (transformer::Workspace::new(), transformer::Workspace::new());
            streamed.forward(&batch, &mut w1, None).unwrap();
            whole.forward(&batch, &mut w2, None).unwrap();
            assert_eq!(w1.logits, w2.logits, "{p} {kernels:?}");
            assert!(w1.logits.iter().all(|x| x.is_finite()));
        }
    }
    // A damaged byte in the Adam moments, which a prepared load does not keep, still fails.
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 3;
    bytes[last] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    let e = checkpoint::load_prepared(&path, Precision::F32, DecoderKernels::Packed).unwrap_err().to_string();
    assert!(e.contains("CRC-32") && e.contains("damaged"), "{e}");
}
