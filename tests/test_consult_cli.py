"""`medpanel consult` as people run it: a physician typing at a terminal, and the embedded model on CodiEsp."""

from __future__ import annotations

import json
import subprocess

import pexpect
import pytest

from conftest import MEDPANEL, ROOT, needs_local_model

NOTE = """Chief Complaint:
Fever and right flank pain

History of Present Illness:
A 34-year-old woman with three days of fever to 39.4 C, dysuria and right flank pain.

Physical Exam:
Right costovertebral angle tenderness.

Pertinent Results:
Urinalysis: 80 leukocytes per field, nitrites positive.

Discharge Diagnosis:
Acute pyelonephritis
"""


# Rich styles words on a real terminal; a styled line reads "Diagnosis<ESC>[0m: ...", so patterns allow style codes.
STYLE = r"(?:\x1b\[[0-9;]*m)*"


def medpanel(args, env):
    return subprocess.run([MEDPANEL, *args], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)


def answer(child, prompt: str, text: str, *, free_text: bool = False) -> None:
    """Wait for the prompt and type the answer as the terminal asks: one line for a form field; for free
    text, lines ended by an empty line."""
    child.expect(prompt)
    child.expect("> ")
    child.sendline(text)
    if free_text:
        child.sendline("")


def test_a_physician_consults_at_the_terminal(cli_env, tmp_path):
    note = tmp_path / "pyelo.txt"
    note.write_text(NOTE)
    child = pexpect.spawn(MEDPANEL, ["consult", str(note), "--physician", "human",
                                     "--assistant", "scripted:Urinalysis shows leukocytes and nitrites; CVA tenderness on the right."],
                          env=cli_env, encoding="utf-8", timeout=60, cwd=str(ROOT))
    child.expect("You are the physician. You know only the chief complaint: Fever and right flank pain")
    child.expect("Your turn as Physician")
    answer(child, "Message", "Please give me your initial evaluation.")
    child.expect(f"turn{STYLE} {STYLE}2{STYLE} {STYLE}Assistant{STYLE}: Urinalysis shows leukocytes")  # the dialogue as it happens
    child.expect("Your turn as Physician")
    child.expect(r"Assistant: Urinalysis shows leukocytes and nitrites; CVA tenderness on the right.\s+\(18 turns left.\)")
    answer(child, r"Action \(one of: ask, submit\)", "ask")
    answer(child, "Message", "Any fever?")
    child.expect("Your turn as Physician")
    answer(child, "Action", "Submit")  # any case is accepted
    answer(child, "Message", "I have enough.")
    child.expect("Write the discharge now")
    answer(child, "Diagnosis", "Acute pyelonephritis")
    answer(child, r"Codes \(comma-separated\)", "n10, R50.9")
    child.expect(f"Diagnosis{STYLE}: Acute pyelonephritis")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before

    shown = json.loads(medpanel(["show", "last", "--item", "pyelo", "--json"], cli_env).stdout)
    physician = [e for e in shown if e["speaker"] == "Physician" and e["kind"] == "turn"]
    assert [(e["round"], e["data"]["action"], e["data"]["message"]) for e in physician] == [
        (1, "ask", "Please give me your initial evaluation."), (3, "ask", "Any fever?"), (5, "submit", "I have enough.")]
    assert {e["model"] for e in physician} == {"human"}
    (discharge,) = [e for e in shown if e["kind"] == "decision"]
    assert discharge["data"]["codes"] == ["N10", "R50.9"]
    assert [e["round"] for e in shown if e["speaker"] == "Assistant"] == [2, 4]


def test_an_assistant_answers_at_the_terminal(cli_env, tmp_path):
    note = tmp_path / "pyelo.txt"
    note.write_text(NOTE)
    script = tmp_path / "physician.yaml"
    script.write_text('- {"message": "What did the urinalysis show?"}\n- {"action": "submit", "message": "Thanks."}\n'
                      '- {"diagnosis": "Acute pyelonephritis", "codes": ["N10"]}\n')
    child = pexpect.spawn(MEDPANEL, ["consult", str(note), "--physician", f"scripted:{script}", "--assistant", "human"],
                          env=cli_env, encoding="utf-8", timeout=60, cwd=str(ROOT))
    child.expect("You are the assistant")
    child.expect("Urinalysis: 80 leukocytes per field")  # the assistant is shown the note
    child.expect("Your turn as Assistant")
    child.expect("What did the urinalysis show")
    answer(child, "type your answer", "80 leukocytes per field and positive nitrites.", free_text=True)
    child.expect(f"Diagnosis{STYLE}: Acute pyelonephritis")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before


def test_bad_consult_input_exits_2_with_a_fix(cli_env, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("Just some text without headings.\n")
    proc = medpanel(["consult", str(empty), "--physician", "scripted:echo"], cli_env)
    assert proc.returncode == 2 and "Chief Complaint" in proc.stderr and "Traceback" not in proc.stderr
    proc = medpanel(["consult", str(empty), "--protocol", "debate"], cli_env)
    assert proc.returncode == 2 and "not a consult protocol" in proc.stderr
    proc = medpanel(["score", "icd10", "--pred", "E11.9", "--gold", "none"], cli_env)
    assert proc.returncode == 2 and "No ICD-10 codes found in --gold" in proc.stderr


def test_score_icd10_command(cli_env, shared_data):
    proc = medpanel(["score", "icd10", "--pred", "E11.65, I10 and M34.59", "--gold", "E11.9; I10; J18.9", "--json"], cli_env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    # code level: hit I10 -> P = R = 1/3, Jaccard 1/5; category level: E11 and I10 -> 2/3
    assert data["scores"]["code_precision"] == pytest.approx(1 / 3) and data["scores"]["code_jaccard"] == pytest.approx(0.2)
    assert data["scores"]["category_f1"] == pytest.approx(2 / 3)
    assert [(c["code"], c["valid"]) for c in data["predicted"]] == [("E11.65", True), ("I10", True), ("M34.59", False)]


@pytest.mark.slow
def test_the_embedded_model_consults_on_a_codiesp_case(cli_env, shared_data):
    """Acceptance: offline, on the embedded model, a CodiEsp case ends in a validated discharge or a recorded
    unfinished consult, shown turn by turn."""
    needs_local_model()
    proc = subprocess.run([MEDPANEL, "consult", "codiesp:0", "--max-turns", "3", "--max-tokens", "48"],
                          env=cli_env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "turn 1 Physician asks:" in proc.stdout and "turn 2 Assistant:" in proc.stdout
    assert ("Diagnosis:" in proc.stdout and "Discharge codes" in proc.stdout) or "Unfinished: no discharge within 3 turns" in proc.stdout
    shown = json.loads(medpanel(["show", "last", "--json"], cli_env).stdout)
    assert shown["items"] == {"done": 1, "failed": 0, "expected": None}
    assert shown["scores"]["turns"]["mean"] == 3.0  # ask, evaluate, then a submit or a last unanswered question
