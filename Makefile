# The two commands of the README:
#   make book   build the course site in English, German and Chinese and serve it
#   make test   run the whole test suite (what CI runs through .ci/run)
# make book installs only the site's packages (requirements/site.txt: no torch);
# make test, lab, notebooks and bench add the rest of requirements/lock.txt, with
# torch's CPU build unless there is an NVIDIA GPU (tools/torch_index.py;
# ATTNLAB_TORCH=cpu|cuda|pip overrides).
# And for learners: make lab   opens the course in JupyterLab (LAB_LANG=de or zh).
# Another Python: make book PYTHON=python3.13 VENV=.venv-3.13

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
BASE_STAMP := $(VENV)/.base-installed
SITE_STAMP := $(VENV)/.site-installed
TORCH_STAMP := $(VENV)/.torch-installed
STAMP  := $(VENV)/.installed
PDF_STAMP := $(VENV)/.pdf-installed
PORT   ?= 8000
LAB_LANG ?= en

# pip installs without compiling (--no-compile): the suite imports about 3400 of the venv's 14000
# modules (transformers' and sympy's models mostly never), and Python compiles and writes each when it
# is first imported; compiling all of them at install cost about 25 s of CPU (docs/decisions.md,
# issue 31). So the recipes' processes may write them: where PYTHONDONTWRITEBYTECODE is set (as on
# the machine this was measured on), every process would otherwise compile torch from source again.
unexport PYTHONDONTWRITEBYTECODE

SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
TEST_RUN := make-$(shell date +%s%N)

.PHONY: book site serve test venv venv-layers site-venv site-background notebooks font browser lab bench pdf audit-page clean

$(BASE_STAMP):                 # an existing venv keeps its Python
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-compile --upgrade "pip>=24"
	touch $@

$(SITE_STAMP): $(BASE_STAMP) requirements/site.txt
	$(BIN)/python -m pip install --quiet --no-compile -r requirements/site.txt
	touch $@

# torch's wheel alone, without its dependencies (the lock brings them): no package in common with the
# site's, so make test installs both at once (venv-layers)
$(TORCH_STAMP): $(BASE_STAMP) requirements/lock.txt tools/torch_index.py
	$(BIN)/python -m pip install --quiet --no-compile $$($(BIN)/python tools/torch_index.py wheel)
	touch $@

$(STAMP): $(SITE_STAMP) $(TORCH_STAMP) requirements/lock.txt pyproject.toml tools/torch_index.py
	$(BIN)/python -m pip install --quiet --no-compile -r requirements/lock.txt
	deps="$$($(BIN)/python tools/torch_index.py deps)"; test -z "$$deps" || $(BIN)/python -m pip install --quiet --no-compile $$deps
	$(BIN)/python -m pip install --quiet --no-compile --no-deps -e .
	touch $@

$(PDF_STAMP): $(SITE_STAMP) requirements/lock.txt
	$(BIN)/python -m pip install --quiet --no-compile -c requirements/lock.txt playwright
	touch $@

site-venv: $(SITE_STAMP)       ## only what the site needs (make book)

venv: $(STAMP)                 ## the project's virtual environment

site: $(SITE_STAMP)            ## build _build/html/{en,de,zh}/ (warnings are errors)
	$(BIN)/python -m tools.site build

serve: $(SITE_STAMP)           ## serve the built site on 127.0.0.1
	$(BIN)/python -m tools.site serve --port $(PORT)

book: site serve               ## command 1: build, then serve on http://127.0.0.1:$(PORT)/

browser:                       ## Debian's chromium (unless ATTNLAB_CHROMIUM names another browser), fc-list, a system CJK font, poppler-utils
	@test -n "$$ATTNLAB_CHROMIUM" || test -x /usr/bin/chromium || \
		{ $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium >/dev/null; }
	@command -v fc-list >/dev/null && test -d /usr/share/fonts/opentype/noto || \
		{ $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq fontconfig fonts-noto-cjk >/dev/null; }
	@command -v pdffonts >/dev/null && command -v pdftotext >/dev/null || \
		{ $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq poppler-utils >/dev/null; }

pdf: $(PDF_STAMP) browser      ## the course as one PDF per language in _build/pdf/ (Chromium prints the built site)
	$(BIN)/python -m tools.pdf build
	$(BIN)/python -m tools.pdf check

# make test starts the site build in the background as soon as the site's packages are there: on
# a fresh clone pip has installed torch's wheel meanwhile (venv-layers) and then installs the rest
# of the lock on one core while the build takes the other; the site tests find the site built for
# this run (ATTNLAB_TEST_RUN) or wait for the build.
site-background: $(SITE_STAMP)  ## (make test) the three sites built in the background for this test run
	@mkdir -p _build
	@nohup $(BIN)/python -m tools.site build --once-for $(TEST_RUN) < /dev/null > _build/site-build-background.log 2>&1 &
	@echo "building the site in the background for this run (_build/site-build-background.log)"

venv-layers:                   ## (make test) the site's packages and torch's wheel, two pips at once
	@$(MAKE) --no-print-directory -j2 $(SITE_STAMP) $(TORCH_STAMP)

test: venv-layers site-background $(STAMP) browser  ## command 2: everything, nbval and browser tests included, on 2 cores; ends with the 10 slowest items
	ATTNLAB_TEST_RUN=$(TEST_RUN) $(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder --timeout 3000 --timeout-method thread --durations=10 --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg \
		tests chapters/en chapters/de chapters/zh solutions/en solutions/de solutions/zh

lab: $(STAMP)                  ## JupyterLab (pinned in the lock) on 127.0.0.1 with chapter 1 open
	$(BIN)/python -m jupyterlab --ServerApp.ip=127.0.0.1 $(if $(SUDO),,--allow-root) \
		--LabApp.default_url=/lab/tree/chapters/$(LAB_LANG)/01-causal-mask.ipynb

notebooks: $(STAMP)            ## regenerate and execute every notebook from its source
	$(BIN)/python -m tools.notebooks build

bench: $(STAMP)                ## measure every performance claim (benchmarks/results/, attnlab/data/benchmarks.json)
	$(BIN)/python -m benchmarks.run --publish $(BENCH_ARGS)

audit-page: $(STAMP)           ## the page "Causality of transformers" from attnlab/data/audit-transformers.json (SWEEP=1: rerun the sweep first, ~15 min on 2 cores)
	$(BIN)/python -m tools.audit_page $(if $(SWEEP),--sweep,)

font: $(STAMP)                 ## rebuild the CJK font subset from Debian's fonts-noto-cjk (installed when missing)
	@test -d /usr/share/fonts/opentype/noto || \
		{ $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq fonts-noto-cjk >/dev/null; }
	$(BIN)/python tools/make_font.py

clean:
	rm -rf _build
