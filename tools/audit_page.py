"""The book page "Causality of transformers <version>", written from the committed sweep.

    python -m tools.audit_page            # chapters/src/transformers-causality.md from the JSON
    python -m tools.audit_page --sweep    # first rerun the sweep (python -m attnlab.audit --all), minutes

The JSON (attnlab/data/audit-transformers.json) is what ``python -m attnlab.audit --all --json``
writes; the page source is a ``kind: page`` source (docs/authoring.md), rendered into
chapters/{en,de,zh}/transformers-causality.md by tools/notebooks.py. ``make audit-page`` runs both.
Every text of the page is here or in attnlab/messages.toml (the verdicts' reasons), in three languages.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "attnlab" / "data" / "audit-transformers.json"
SOURCE = ROOT / "chapters" / "src" / "transformers-causality.md"
LANGS = ("en", "de", "zh")
BART_FAMILY = ("BartForCausalLM", "BigBirdPegasusForCausalLM", "BlenderbotForCausalLM", "BlenderbotSmallForCausalLM",
               "MarianForCausalLM", "MBartForCausalLM", "MvpForCausalLM", "PegasusForCausalLM", "PLBartForCausalLM")
REPRO = ('python -c "import torch, transformers as t; t.BartForCausalLM(t.BartConfig(encoder_layers=1, '
         'decoder_layers=2, d_model=16, vocab_size=64))(torch.ones(1, 4, dtype=torch.long), use_cache=True)"')

TEXT = {
    "title": {"en": "# Causality of transformers {version}",
              "de": "# Kausalität von transformers {version}",
              "zh": "# transformers {version} 的因果性"},
    "intro": {
        "en": "This page is the result of [chapter 10](10-auditing-a-real-model.ipynb)'s auditor run on every class that Hugging Face `transformers` {version} registers for causal language modelling, plus a few configs, encoders and encoder-decoders: **{n} targets**, with `python -m attnlab.audit --all` (PyTorch {torch}, CPU). Each class was built from a tiny config with random weights, as the library intends (a causal-LM class of an encoder family with `is_decoder=True`), and audited under `eager` and `sdpa`, without padding and with left padding, through the KV cache and without it, on 8 tokens; tolerances are $10^{{-5}}$ times the scale of the logits. A class that refuses an implementation was audited under the other. Each target had {limit} s.",
        "de": "Diese Seite ist das Ergebnis des Prüfwerkzeugs aus [Kapitel 10](10-auditing-a-real-model.ipynb), angewandt auf jede Klasse, die Hugging Face `transformers` {version} für kausales Sprachmodellieren registriert, dazu einige Konfigurationen, Encoder und Encoder-Decoder: **{n} Ziele**, mit `python -m attnlab.audit --all` (PyTorch {torch}, CPU). Jede Klasse wurde aus einer winzigen Konfiguration mit Zufallsgewichten gebaut, so wie die Bibliothek es vorsieht (eine Causal-LM-Klasse aus einer Encoder-Familie mit `is_decoder=True`), und unter `eager` und `sdpa` geprüft, ohne Padding und mit Left Padding, mit und ohne KV-Cache, auf 8 Tokens; die Toleranzen betragen $10^{{-5}}$ mal die Größenordnung der Logits. Eine Klasse, die eine Implementierung ablehnt, wurde unter der anderen geprüft. Jedes Ziel hatte {limit} s Zeit.",
        "zh": "本页是[第 10 章](10-auditing-a-real-model.ipynb)的审查工具在 Hugging Face `transformers` {version} 为因果语言建模注册的每一个类上运行的结果，外加几个配置、编码器和编码器-解码器：共 **{n} 个目标**，命令是 `python -m attnlab.audit --all`（PyTorch {torch}，CPU）。每个类都按库的本意用一份微型配置和随机权重构建（编码器家族的因果语言模型类设置 `is_decoder=True`），并在 `eager` 和 `sdpa` 下、无填充和左侧填充、使用和不使用 KV cache 的情况下，在 8 个 token 上审查；容差是 $10^{{-5}}$ 乘以 logits 的量级。不支持某种实现的类只在另一种实现下审查。每个目标的时间上限是 {limit} 秒。"},
    "counts": {"en": "## The verdicts", "de": "## Die Urteile", "zh": "## 结论"},
    "kinds": {
        "en": "- **LEAK**: a test found an output that reads a later input (which test, which pair, which implementation).\n- **OUTPUTS DIFFER**: cached and uncached logits, or padded and unpadded ones, differ beyond the tolerance, where the padding is read (a model that only shifts absolute positions under left padding is not flagged).\n- **LIBRARY ERROR**: the library crashed on a valid input; a finding, with a one-line repro.\n- **NOT APPLICABLE**: the tests do not apply (the class takes no token ids).\n- **COULD NOT AUDIT**: the library could not build or run the tiny model (its message in one line), or the time ran out.",
        "de": "- **LECK**: Ein Test hat eine Ausgabe gefunden, die eine spätere Eingabe liest (welcher Test, welches Paar, welche Implementierung).\n- **ABWEICHUNG**: Die Logits mit und ohne Cache oder mit und ohne Padding weichen über die Toleranz hinaus voneinander ab, und das Padding wird gelesen (ein Modell, bei dem sich mit Left Padding nur die absoluten Positionen verschieben, wird nicht gemeldet).\n- **FEHLER DER BIBLIOTHEK**: Die Bibliothek ist bei einer gültigen Eingabe abgestürzt; ein Befund, samt einer Zeile, die ihn reproduziert.\n- **NICHT ANWENDBAR**: Die Tests sind nicht anwendbar (die Klasse nimmt keine Token-IDs an).\n- **NICHT PRÜFBAR**: Die Bibliothek konnte das winzige Modell nicht bauen oder ausführen (ihre Meldung in einer Zeile), oder die Zeit lief ab.",
        "zh": "- **泄露**：某个测试发现一个输出读取了后面的输入（哪个测试、哪一对位置、哪种实现）。\n- **结果不一致**：有缓存和无缓存的 logits，或有填充和无填充的 logits，相差超过容差，说明 padding 被读取了（左侧填充时只是绝对位置发生偏移的模型不会被标出）。\n- **库的错误**：库在合法的输入上崩溃了；这算一项发现，附有一行复现命令。\n- **不适用**：这些测试不适用（该类不接受 token id）。\n- **无法审查**：库无法构建或运行这个微型模型（附上它的一行报错），或者超时。"},
    "col_class": {"en": "class", "de": "Klasse", "zh": "类"},
    "col_verdict": {"en": "verdict", "de": "Urteil", "zh": "结论"},
    "col_reason": {"en": "why", "de": "Begründung", "zh": "原因"},
    "col_built": {"en": "built with", "de": "gebaut mit", "zh": "构建方式"},
    "refused": {"en": "{impl} refused", "de": "{impl} abgelehnt", "zh": "不支持 {impl}"},
    "bug_title": {"en": "## A library bug: the cache of the BART family's causal-LM classes",
                  "de": "## Ein Fehler der Bibliothek: der Cache der Causal-LM-Klassen der BART-Familie",
                  "zh": "## 库的一个 bug：BART 家族因果语言模型类的缓存"},
    "bug": {
        "en": "The `*ForCausalLM` classes of the BART family ({classes}) size their KV cache by `config.num_hidden_layers`, which these configs map to `encoder_layers`; the decoder has `decoder_layers`. With more decoder than encoder layers, any forward pass with `use_cache=True` (and so `generate()`) raises `IndexError: list index out of range` at the first layer the cache lacks. The auditor's tiny configs have `encoder_layers=1, decoder_layers=2` on purpose: a valid config, and the mismatch is where such a bug lives. The uncached pass runs, so the auditor calls it a library error, not a leak. One line reproduces it with the library alone:\n\n```sh\n{repro}\n```\n\nA similar mistake in `generate()` for encoder-decoder models was reported as [huggingface/transformers#40120](https://github.com/huggingface/transformers/issues/40120) and fixed in [PR #40277](https://github.com/huggingface/transformers/pull/40277) (2025); for these decoder-only classes we found no upstream issue or fix among the stored issue threads we searched.",
        "de": "Die `*ForCausalLM`-Klassen der BART-Familie ({classes}) bemessen ihren KV-Cache nach `config.num_hidden_layers`, was diese Konfigurationen auf `encoder_layers` abbilden; der Decoder hat aber `decoder_layers` Schichten. Hat er mehr Schichten als der Encoder, bricht jeder Vorwärtsdurchlauf mit `use_cache=True` (und damit `generate()`) mit `IndexError: list index out of range` ab, an der ersten Schicht, die im Cache fehlt. Die winzigen Konfigurationen des Prüfwerkzeugs haben absichtlich `encoder_layers=1, decoder_layers=2`: Das ist eine gültige Konfiguration, und genau bei einer solchen Ungleichheit stecken solche Fehler. Der Durchlauf ohne Cache läuft, deshalb wertet das Prüfwerkzeug das als Fehler der Bibliothek, nicht als Leck. Eine einzige Zeile reproduziert ihn, nur mit der Bibliothek:\n\n```sh\n{repro}\n```\n\nEinen ähnlichen Fehler in `generate()` für Encoder-Decoder-Modelle meldete [huggingface/transformers#40120](https://github.com/huggingface/transformers/issues/40120); behoben wurde er in [PR #40277](https://github.com/huggingface/transformers/pull/40277) (2025). Für diese reinen Decoder-Klassen haben wir in den gespeicherten Issue-Threads, die wir durchsucht haben, weder ein Issue noch eine Korrektur gefunden.",
        "zh": "BART 家族的 `*ForCausalLM` 类（{classes}）按 `config.num_hidden_layers` 确定 KV cache 的层数，而这些配置把它映射到 `encoder_layers`；解码器的层数却是 `decoder_layers`。当解码器的层数多于编码器时，任何 `use_cache=True` 的前向传播（因而 `generate()` 也一样）都会在缓存缺少的第一层抛出 `IndexError: list index out of range`。审查工具的微型配置有意设为 `encoder_layers=1, decoder_layers=2`：这是合法的配置，而这类 bug 恰恰藏在层数不相等的地方。不用缓存的前向传播能正常运行，所以审查工具把它判为库的错误，而不是泄露。只用这个库，一行命令就能复现：\n\n```sh\n{repro}\n```\n\n`generate()` 在编码器-解码器模型上的一个类似错误曾被报告为 [huggingface/transformers#40120](https://github.com/huggingface/transformers/issues/40120)，并在 [PR #40277](https://github.com/huggingface/transformers/pull/40277)（2025 年）中修复；对这些只有解码器的类，我们在检索过的已存档 issue 讨论中没有找到上游的 issue 或修复。"},
    "history_title": {"en": "## Two bugs of earlier versions", "de": "## Zwei Fehler früherer Versionen",
                      "zh": "## 早期版本的两个 bug"},
    "history": {
        "en": "Built as decoders, RoFormer, BigBird, RemBert and MegatronBert read ahead in 5.17.0 ([#48745](https://github.com/huggingface/transformers/issues/48745), fixed in [PR #48760](https://github.com/huggingface/transformers/pull/48760)): the auditor calls all four LEAK there (output 0 reads input 1, under `eager`, the only implementation they accept) and causal here. Doge under `sdpa` reads ahead in 5.17.0 without padding and not with it ([#48748](https://github.com/huggingface/transformers/issues/48748)): LEAK there, causal here. A run against another version prints its own rows; where that version's forward takes the cache under another keyword (`past_key_values` before 5.2x), the auditor uses it, and where it takes none, it says the cache check cannot run.",
        "de": "Als Decoder gebaut, lesen RoFormer, BigBird, RemBert und MegatronBert in 5.17.0 voraus ([#48745](https://github.com/huggingface/transformers/issues/48745), behoben in [PR #48760](https://github.com/huggingface/transformers/pull/48760)): Das Prüfwerkzeug meldet dort für alle vier LECK (Ausgabe 0 liest Eingabe 1, unter `eager`, der einzigen Implementierung, die sie annehmen) und hier kausal. Doge liest unter `sdpa` in 5.17.0 ohne Padding voraus, mit Padding nicht ([#48748](https://github.com/huggingface/transformers/issues/48748)): dort LECK, hier kausal. Ein Lauf mit einer anderen Version gibt seine eigenen Zeilen aus; nimmt deren Vorwärtsdurchlauf den Cache unter einem anderen Namen (`past_key_values` vor 5.2x), verwendet das Prüfwerkzeug diesen, und nimmt er keinen, sagt es, dass der Cache-Vergleich nicht laufen kann.",
        "zh": "作为解码器构建时，RoFormer、BigBird、RemBert 和 MegatronBert 在 5.17.0 中会读取后面的 token（[#48745](https://github.com/huggingface/transformers/issues/48745)，在 [PR #48760](https://github.com/huggingface/transformers/pull/48760) 中修复）：审查工具在那里把这四个类都判为泄露（输出 0 读取了输入 1，在它们唯一接受的 `eager` 实现下），在这里判为因果。Doge 在 5.17.0 的 `sdpa` 下，无填充时会读取后面的 token，有填充时不会（[#48748](https://github.com/huggingface/transformers/issues/48748)）：在那里是泄露，在这里是因果。针对其他版本运行时，会打印那个版本自己的结果；如果那个版本的前向传播用另一个参数名接收缓存（5.2x 之前是 `past_key_values`），审查工具就用这个参数名；如果根本不接收缓存，工具会说明无法进行缓存比较。"},
    "blind_title": {"en": "## What the audit cannot see", "de": "## Was die Prüfung nicht sieht", "zh": "## 审查看不到的东西"},
    "blind": {
        "en": "- Inputs it did not try: other lengths than 8, right padding, packed batches, longer caches, batch sizes above 1.\n- Code paths it did not take: flash kernels, `flex_attention`, `torch.compile`, a GPU, dtypes other than float32, training mode.\n- Leaks below the tolerance of the prefix and cut tests ($10^{-5}$ times the logits' scale); the Jacobian test has no tolerance but sees only differentiable paths.\n- Tiny configs are not checkpoints: a pattern that appears only with more layers (a global layer every sixth), more experts or a longer window is not tried.\n- Multimodal inputs: a model that also reads images or audio is audited on its token ids alone.\n- Classes it could not build or run (COULD NOT AUDIT) are not audited at all: no verdict is no clean bill of health.",
        "de": "- Eingaben, die sie nicht ausprobiert hat: andere Längen als 8, Right Padding, gepackte Batches, längere Caches, Batches mit mehr als einer Sequenz.\n- Codepfade, die sie nicht genommen hat: Flash-Kernel, `flex_attention`, `torch.compile`, eine GPU, andere Datentypen als float32, der Trainingsmodus.\n- Lecks unterhalb der Toleranz von Präfix- und Abschneidetest ($10^{-5}$ mal die Größenordnung der Logits); der Jacobi-Test hat keine Toleranz, sieht aber nur differenzierbare Pfade.\n- Winzige Konfigurationen sind keine Checkpoints: Ein Muster, das erst mit mehr Schichten auftritt (etwa jede sechste Schicht global), mit mehr Experten oder einem längeren Fenster, wird nicht ausprobiert.\n- Multimodale Eingaben: Ein Modell, das auch Bilder oder Audio liest, wird nur auf seinen Token-IDs geprüft.\n- Klassen, die sich nicht bauen oder ausführen ließen (NICHT PRÜFBAR), sind gar nicht geprüft: Kein Urteil heißt nicht, dass alles in Ordnung ist.",
        "zh": "- 没有尝试过的输入：8 以外的长度、右侧填充、打包的批、更长的缓存、批大小大于 1 的情况。\n- 没有走过的代码路径：flash kernel、`flex_attention`、`torch.compile`、GPU、float32 以外的数据类型、训练模式。\n- 低于前缀测试和截断测试容差（$10^{-5}$ 乘以 logits 的量级）的泄露；雅可比测试没有容差，但只能看到可微的路径。\n- 微型配置不是真实的检查点：只在层数更多（例如每六层一个全局层）、专家更多或窗口更长时才出现的模式，这里没有尝试。\n- 多模态输入：同时读取图像或音频的模型只在它的 token id 上审查。\n- 无法构建或运行的类（无法审查）根本没有被审查：没有结论不等于没有问题。"},
    "all_title": {"en": "## Every target", "de": "## Alle Ziele", "zh": "## 全部目标"},
    "footer": {
        "en": "Generated by `make audit-page` from `attnlab/data/audit-transformers.json` (`tools/audit_page.py`); a test re-audits the fastest rows of each verdict kind, so the page cannot drift from the auditor.",
        "de": "Erzeugt mit `make audit-page` aus `attnlab/data/audit-transformers.json` (`tools/audit_page.py`); ein Test prüft die schnellsten Zeilen jeder Urteilsart erneut, damit die Seite nicht vom Prüfwerkzeug abweicht.",
        "zh": "由 `make audit-page` 从 `attnlab/data/audit-transformers.json` 生成（`tools/audit_page.py`）；有一个测试会对每种结论中最快的几行重新审查，使本页不会与审查工具脱节。"},
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _built(verdict, lang: str, tr) -> str:
    parts = []
    for key, values in verdict.notes:
        if key == "audit.note_set":
            parts.append(f"`{values['setting']}`")
        elif key == "audit.note_skipped":
            parts.append(TEXT["refused"][lang].format(impl=f"`{values['impl']}`"))
    return ", ".join(parts)


def page_source(data: dict) -> str:
    """The ``kind: page`` source of the page, from the sweep's JSON."""
    from attnlab.audit import KINDS, Verdict
    from attnlab.i18n import tr

    verdicts = [Verdict.from_dict(v) for v in data["verdicts"]]
    values = dict(version=data["transformers"], torch=data["torch"], n=len(verdicts), limit=f"{data.get('limit', 120):g}")
    order = {kind: i for i, kind in enumerate(("leak", "differ", "library_error", "could_not_audit", "not_applicable",
                                                "ok"))}
    bart = [f"`{v.target}`" for v in verdicts if v.target in BART_FAMILY and v.kind == "library_error"]
    sections = []

    def block(texts: dict) -> dict:
        return texts

    intro = {lang: TEXT["title"][lang].format(**values) + "\n\n" + TEXT["intro"][lang].format(**values)
             for lang in LANGS}
    sections.append(block(intro))
    counts = {}
    for lang in LANGS:
        lines = [TEXT["counts"][lang], "", f"| {TEXT['col_verdict'][lang]} | n |", "|---|---|"]
        for kind in KINDS:
            n = sum(v.kind == kind for v in verdicts)
            if n:
                lines.append(f"| {tr(f'audit.kind_{kind}', lang=lang)} | {n} |")
        counts[lang] = "\n".join(lines) + "\n\n" + TEXT["kinds"][lang]
    sections.append(block(counts))
    sections.append(block(
        {lang: TEXT["bug_title"][lang] + "\n\n" + TEXT["bug"][lang].format(classes=", ".join(bart) or "-", repro=REPRO)
         for lang in LANGS}))
    sections.append(block({lang: TEXT["history_title"][lang] + "\n\n" + TEXT["history"][lang] for lang in LANGS}))
    sections.append(block({lang: TEXT["blind_title"][lang] + "\n\n" + TEXT["blind"][lang] for lang in LANGS}))
    tables = {}
    for lang in LANGS:
        lines = [TEXT["all_title"][lang], "",
                 f"| {TEXT['col_class'][lang]} | {TEXT['col_verdict'][lang]} | {TEXT['col_reason'][lang]} | "
                 f"{TEXT['col_built'][lang]} |", "|---|---|---|---|"]
        for v in sorted(verdicts, key=lambda v: (order[v.kind], v.target)):
            lines.append(f"| `{v.target}` | {v.word(lang)} | {_cell(v.reason(lang))} | {_built(v, lang, tr)} |")
        tables[lang] = "\n".join(lines) + "\n\n" + TEXT["footer"][lang]
    sections.append(block(tables))
    header = "---\nkind: page\n---\n\n"
    whole = {lang: "\n\n".join(section[lang] for section in sections) for lang in LANGS}  # one prose cell
    return header + "\n\n".join(f"::::{{lang}} {lang}\n{whole[lang]}\n::::" for lang in LANGS) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--sweep" in argv:
        subprocess.run([sys.executable, "-m", "attnlab.audit", "--all", "--workers", "2", "--limit", "120",
                        "--json", str(DATA)], check=False, cwd=ROOT)
    data = json.loads(DATA.read_text("utf-8"))
    SOURCE.write_text(page_source(data), "utf-8")
    subprocess.run([sys.executable, "-m", "tools.notebooks", "build", str(SOURCE.relative_to(ROOT))], check=True,
                   cwd=ROOT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
