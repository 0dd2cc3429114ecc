//! docs/walkthrough.md ties each step of the paper to a line of our code and of the PyTorch twin,
//! every link written as [`NAME`](../PATH#LN). NAME must stand on line N of PATH: a change that
//! moves, renames or removes the linked code fails here, so the walkthrough cannot rot.

use transformer::test_support::repo;

#[test]
fn every_walkthrough_link_lands_on_the_line_that_holds_its_name() {
    let text = std::fs::read_to_string(repo("docs/walkthrough.md")).unwrap();
    let link = regex::Regex::new(r"\[`([^`]+)`\]\(\.\./([^)#\s]+)#L(\d+)\)").unwrap();
    let (mut checked, mut wrong) = (0, Vec::new());
    for c in link.captures_iter(&text) {
        let (name, path, line) = (&c[1], &c[2], c[3].parse::<usize>().unwrap());
        let held = std::fs::read_to_string(repo(path)).ok().and_then(|f| f.lines().nth(line - 1).map(str::to_string));
        match held {
            Some(l) if l.contains(name) => checked += 1,
            Some(l) => wrong.push(format!("{path}#L{line} should hold `{name}`, holds: {}", l.trim())),
            None => wrong.push(format!("{path}#L{line} (`{name}`): no such file or line")),
        }
    }
    // A link into the code in any other form (no line, a link without the name) escapes the check.
    let loose = regex::Regex::new(r"\]\(\.\./[^)]*\.(?:rs|py)(?:\)|#[^L])").unwrap();
    for m in loose.find_iter(&text) {
        wrong.push(format!("a code link without #L<line>: {}", m.as_str()));
    }
    assert!(wrong.is_empty(), "{} of {} links are stale:\n{}", wrong.len(), checked + wrong.len(), wrong.join("\n"));
    // Every section of the batch's path is linked (the walkthrough is not an empty page).
    for step in ["## 4. Scaled dot-product", "## 7. Output projection", "## 9. Adam", "## 10. Inference"] {
        assert!(text.contains(step), "the walkthrough lost its section {step:?}");
    }
    assert!(checked >= 100, "only {checked} links: the walkthrough lost its links");
}
