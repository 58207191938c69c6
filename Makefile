# Every target sets up .venv itself from pyproject.toml and the pinned constraints.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-osmosis03 test-cloud lint typecheck unit load load-dynamodb bench reliability cost clean

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed; set PYTHON=python3.11")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $@

demo: $(STAMP)
	$(BIN)/rollout-sdk demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

test: lint typecheck template-check
	$(BIN)/pytest -q
	$(MAKE) --no-print-directory test-osmosis03

# The osmosis-ai 0.3.8 suite (tests/osmosis03): 0.3.8's own client and author API, in an
# environment of their own (Python 3.12 or newer, which 0.3.8 needs; the kit needs 3.11). It
# looks for the interpreter on PATH and in pyenv; OSMOSIS_PYTHON names one.
OSMOSIS_VENV := .venv-osmosis03
OSMOSIS_CANDIDATES = $(OSMOSIS_PYTHON) python3.14 python3.13 python3.12 $(wildcard $(HOME)/.pyenv/versions/3.1[2-9]*/bin/python3)
find_osmosis_python = $(firstword $(foreach p,$(OSMOSIS_CANDIDATES),$(shell $(p) -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && echo $(p))))

$(OSMOSIS_VENV)/.installed: infra/requirements-osmosis03.txt
	@test -x $(OSMOSIS_VENV)/bin/python || { \
		py="$(call find_osmosis_python)"; \
		test -n "$$py" || { echo "make test-osmosis03: osmosis-ai 0.3.8 needs Python 3.12 or newer, and none was found on PATH or in pyenv; install one and set OSMOSIS_PYTHON=/path/to/python3.12" >&2; exit 2; }; \
		echo "osmosis-ai 0.3.8's environment: $$py"; \
		$$py -m venv $(OSMOSIS_VENV); }
	$(OSMOSIS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(OSMOSIS_VENV)/bin/python -m pip install --quiet -r infra/requirements-osmosis03.txt
	@touch $@

test-osmosis03: $(STAMP) $(OSMOSIS_VENV)/.installed
	KIT_PYTHON=$(abspath $(BIN)/python) $(OSMOSIS_VENV)/bin/python -m pytest -q -c tests/osmosis03/pytest.ini tests/osmosis03

# The deployed-stack suite, tests/cloud, against the stack AWS_SAM_STACK_NAME names, calling back
# the TrainGate stand-in at CLOUD_SUITE_TRAINGATE_URL (reachable from Lambda) with its
# CLOUD_SUITE_CALLBACK_KEY: docs/aws.md, "First deploy". It uses the shell's AWS credentials and
# region, says which before its first AWS call, and runs without tests/conftest.py (which makes
# every other test's AWS fake). `make test` runs the same suite against the local server.
test-cloud: $(STAMP)
	@test -n "$$AWS_SAM_STACK_NAME" || { echo "make test-cloud: set AWS_SAM_STACK_NAME to the deployed stack (docs/aws.md, 'First deploy'); make test runs tests/cloud against the local server" >&2; exit 2; }
	$(BIN)/pytest -q --confcutdir=tests/cloud tests/cloud

# The 300-rollout load on the local server (outside load driver, loopback only).
load: $(STAMP)
	$(BIN)/python -m bench.load --rollouts 300 --concurrency 50 --store sqlite

# The same load on the DynamoDB store (an embedded moto server on 127.0.0.1).
load-dynamodb: $(STAMP)
	$(BIN)/python -m bench.load --rollouts 300 --concurrency 50 --store dynamodb

# The benchmarks (bench/bench.py), loopback only, about 7 minutes (docs/performance.md): throughput and init latency
# per store against the bare-protocol baseline, SDK overhead per chat call, memory per rollout
# in flight, AWS requests per rollout, cold start, init parse cost and the answer cap (fresh
# processes), the re-drive's reads beside 1k, 10k and 100k
# delivered records (alone: python -m bench.redrive). Writes bench/results/<UTC time>.json,
# latest.json and latest.png; a missed goal is reported, not a failure.
BENCH_STAMP := $(VENV)/.installed-bench
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,bench]'
	@touch $@

bench: $(BENCH_STAMP)
	$(BIN)/python -m bench.bench

# The fault-injection matrix: over 1,000 rollouts under TrainGate faults, SIGKILL, duplicates,
# cancel, backpressure and bad input, on the local server and the Lambda handlers (loopback
# only). Writes docs/reliability.md; fails if any rollout is lost or duplicated or any outcome
# is wrong. `make test` runs the same scenarios small (tests/reliability).
reliability: $(STAMP)
	$(BIN)/python -m bench.reliability --out docs/reliability.md

# Lambda GB-seconds per 1,000 rollouts for each hand-off (a 2 s model), then docs/cost.md.
cost: $(STAMP)
	$(BIN)/python -m bench.handoff --rollouts 1000 --chat-delay 2
	$(BIN)/python -m bench.cost > /dev/null
	@echo "wrote docs/cost.md"

clean:
	rm -rf $(VENV) $(SAM_VENV) .pytest_cache .mypy_cache .ruff_cache .rollout-state .aws-sam

# ---------------------------------------------------------------- AWS (SAM)
# SAM's makefile builder calls build-<LogicalId> with ARTIFACTS_DIR set, once per resource.
# The dependencies are built once, into the DependenciesLayer (a Lambda layer every function
# carries: Lambda unpacks it into /opt, and /opt/python is on the runtime's sys.path after the
# function's own /var/task): infra/requirements-lambda.txt plus the agent's own
# requirements.txt, built for the Lambda runtime's Python and architecture (ARCH=x86_64 or
# arm64, matching the template's Architecture), trimmed and compiled. Each function's own
# artifact holds only the code: handler.py, rollout_sdk/ without local/ and testing/, and the
# agent's folders (AGENT_SOURCES), compiled.
AGENT_SOURCES ?= examples
# The template's McpFolder, when the functions serve an MCP folder (MCPAgentLoop): set, FastMCP
# and its dependencies (infra/requirements-mcp.txt) enter the dependency layer; empty, they do
# not. `make build-lambda MCP_FOLDER=examples/mcp_calculator` (or MCP_FOLDER=... in the
# environment of `sam build`) reaches the build-<LogicalId> targets SAM runs: make passes it on.
MCP_FOLDER ?=
ARCH ?= x86_64
LAMBDA_PYTHON ?= 3.13
# The botocore version of the Lambda runtime (its "runtime-included SDK versions", or the line a
# deployed function logs when it differs): the kit's botocore data is built from it. Empty: the
# version constraints.txt pins.
LAMBDA_BOTOCORE ?=
LAMBDA_PLATFORM = $(if $(filter arm64,$(ARCH)),manylinux2014_aarch64,manylinux2014_x86_64)
SAM_VENV := .venv-sam
SAM := $(SAM_VENV)/bin/sam
# Offline and anonymous: a fake region and credentials, no telemetry. Nothing here calls AWS.
SAM_ENV := AWS_DEFAULT_REGION=us-east-1 AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing SAM_CLI_TELEMETRY=0

# Bytecode by the runtime's own Python: Lambda's code folder and /opt are read-only, so without
# it every cold start compiles every module from source. unchecked-hash, because a zip keeps
# file times only to 2 seconds (a timestamp check could reject every .pyc); make package checks
# that a fresh process compiles nothing from source.
define compile_for_lambda
	python$(LAMBDA_PYTHON) -m compileall -q -j 0 --invalidation-mode unchecked-hash "$(1)" > /dev/null
endef

# One function's code (the same for every function: each runs its own entry point of handler.py).
define function_artifact
	mkdir -p "$(ARTIFACTS_DIR)"
	cp handler.py "$(ARTIFACTS_DIR)/"
	cp -R rollout_sdk $(AGENT_SOURCES) "$(ARTIFACTS_DIR)/"
	# Not the local tooling (CLI, local server, demo, emulator, invoke) nor the test helpers
	# (stand-in, server threads): nothing on Lambda imports them (bench/package.py checks).
	rm -rf "$(ARTIFACTS_DIR)/rollout_sdk/local" "$(ARTIFACTS_DIR)/rollout_sdk/testing" \
		"$(ARTIFACTS_DIR)/rollout_sdk/__main__.py"
	find "$(ARTIFACTS_DIR)" -name '__pycache__' -prune -exec rm -rf {} +
	$(if $(MCP_FOLDER),@test -f "$(ARTIFACTS_DIR)/$(MCP_FOLDER)/main.py" || { echo "MCP_FOLDER=$(MCP_FOLDER): no main.py there in the artifact; name a folder under AGENT_SOURCES ($(AGENT_SOURCES)) that holds the server's main.py" >&2; exit 2; })
	$(call compile_for_lambda,$(ARTIFACTS_DIR))
endef

# The dependency layer: everything under python/, as Lambda expects a Python layer.
LAYER_SITE = $(ARTIFACTS_DIR)/python
# A layer's packages: the requirement files $(1), for the runtime's platform and Python.
define layer_install
	mkdir -p "$(LAYER_SITE)"
	$(PYTHON) -m pip install --quiet --disable-pip-version-check --no-compile \
		--platform $(LAMBDA_PLATFORM) --implementation cp --python-version $(LAMBDA_PYTHON) \
		--only-binary=:all: --target "$(LAYER_SITE)" -c constraints.txt $(1)
	rm -rf "$(LAYER_SITE)"/*.dist-info/RECORD "$(LAYER_SITE)/bin"
endef

# What botocore brings and the Lambda Python runtime provides (with boto3): urllib3,
# python-dateutil and six. No layer ships them.
define drop_runtime_provided
	rm -rf "$(LAYER_SITE)"/urllib3 "$(LAYER_SITE)"/urllib3-*.dist-info \
		"$(LAYER_SITE)"/dateutil "$(LAYER_SITE)"/python_dateutil-*.dist-info \
		"$(LAYER_SITE)"/six.py "$(LAYER_SITE)"/six-*.dist-info
endef

# Every layer's last steps: no type stubs or test folders of dependencies, package metadata
# without its long description (what importlib.metadata reads, names, versions, requirements
# and entry points, stays), stripped extensions, and bytecode by the runtime's Python.
define layer_finish
	find "$(LAYER_SITE)" \( -name '*.pyi' -o -name 'py.typed' \) -delete
	find "$(LAYER_SITE)" -mindepth 2 -type d \( -name tests -o -name __pycache__ \) -prune -exec rm -rf {} +
	$(PYTHON) -c 'import pathlib, sys; [p.write_text(p.read_text(encoding="utf-8").split("\n\n", 1)[0] + "\n", encoding="utf-8") for p in pathlib.Path(sys.argv[1]).glob("*.dist-info/METADATA")]' "$(LAYER_SITE)"
	find "$(LAYER_SITE)" -name '*.so' -exec strip --strip-unneeded {} + 2>/dev/null || true
	$(call compile_for_lambda,$(LAYER_SITE))
endef

define dependency_layer
	$(call layer_install,-r infra/requirements-lambda.txt -r requirements.txt $(if $(MCP_FOLDER),-r infra/requirements-mcp.txt))
	# botocore's data of the services the kit calls, as /opt/botocore-data, from the botocore
	# the Lambda runtime has: LAMBDA_BOTOCORE names its version (a deployed function logs it
	# when the two differ), else the one just installed (constraints.txt's). The kit's clients
	# read it only under that very version (rollout_sdk/aws/clients.py).
	$(if $(LAMBDA_BOTOCORE),rm -rf "$(ARTIFACTS_DIR)/.botocore" && $(PYTHON) -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --dest "$(ARTIFACTS_DIR)/.botocore" "botocore==$(LAMBDA_BOTOCORE)" && $(PYTHON) -m zipfile -e "$(ARTIFACTS_DIR)"/.botocore/botocore-*.whl "$(ARTIFACTS_DIR)/.botocore")
	$(PYTHON) infra/botocore_data.py "$(if $(LAMBDA_BOTOCORE),$(ARTIFACTS_DIR)/.botocore,$(LAYER_SITE))/botocore" "$(ARTIFACTS_DIR)/botocore-data"
	rm -rf "$(ARTIFACTS_DIR)/.botocore"
	# aws-xray-sdk requires botocore, which brings urllib3, python-dateutil and six: the Lambda
	# Python runtime provides all four (with boto3), so the layer does not ship them (22 MB).
	rm -rf "$(LAYER_SITE)"/botocore "$(LAYER_SITE)"/botocore-*.dist-info
	$(drop_runtime_provided)
	# Only what runs: not Powertools' event_handler (2 MB; the API is FastAPI behind Mangum,
	# never imported).
	rm -rf "$(LAYER_SITE)/aws_lambda_powertools/event_handler"
	# Nor what only development tools load, or what cannot import without a package the layer
	# does not ship: the test helpers of anyio, Starlette and pydantic's mypy plugin; anyio's trio
	# backend (trio); the command lines of httpx and python-dotenv (click); Powertools' validation
	# (fastjsonschema) and data masking (jsonpath-ng). About 0.5 MB.
	rm -rf "$(LAYER_SITE)"/anyio/_backends/_trio.py "$(LAYER_SITE)"/anyio/pytest_plugin.py \
		"$(LAYER_SITE)"/starlette/testclient.py "$(LAYER_SITE)"/pydantic/mypy.py \
		"$(LAYER_SITE)"/httpx/_main.py "$(LAYER_SITE)"/dotenv/cli.py \
		"$(LAYER_SITE)"/aws_lambda_powertools/utilities/validation \
		"$(LAYER_SITE)"/aws_lambda_powertools/utilities/data_masking
	# Nor pydantic.v1, pydantic 1's API kept inside pydantic 2 (1 MB): FastAPI no longer takes
	# its models and only imports it to check that a route's types are not among them (about
	# 20 ms of the API function's cold start), a check it skips when the import fails. An agent
	# that needs pydantic.v1 on Lambda deletes this line (docs/aws.md, "The dependency layer").
	rm -rf "$(LAYER_SITE)"/pydantic/v1
	# The TrainGate client sends through aiohttp (rollout_sdk/traingate/transport.py): not its server,
	# test or gunicorn modules; nor httpcore and h11, which httpx imports only to build its own
	# transport, which nothing on Lambda builds (bench/package.py imports the handler and runs an
	# event of each function on the result).
	rm -rf "$(LAYER_SITE)"/aiohttp/web*.py "$(LAYER_SITE)"/aiohttp/pytest_plugin.py \
		"$(LAYER_SITE)"/aiohttp/test_utils.py "$(LAYER_SITE)"/aiohttp/worker.py \
		"$(LAYER_SITE)"/httpcore "$(LAYER_SITE)"/httpcore-*.dist-info \
		"$(LAYER_SITE)"/h11 "$(LAYER_SITE)"/h11-*.dist-info
	# Nor the sources the compiled extensions were built from (Cython and C), nor the software
	# bills of materials some wheels carry: nothing reads them at run time.
	find "$(LAYER_SITE)" -type f \( -name '*.pyx' -o -name '*.pxd' -o -name '*.pxi' \
		-o -name '*.c' -o -name '*.h' -o -name '*.cpp' \) -delete
	rm -rf "$(LAYER_SITE)"/*.dist-info/sboms
	$(layer_finish)
endef

# DurableWorker=true (template.yaml's DurableSdkLayer, carried by the durable worker, and by the
# API and re-drive functions, which start its executions): AWS's durable execution SDK with the
# boto3 and botocore constraints.txt pins (the SDK needs 1.43.114 or newer), botocore's data
# whole (an agent's own clients may call any service) but for its documentation examples
# (1.6 MB). The kit's clients read the dependency layer's botocore-data, built from the same
# pinned botocore, so they skip botocore's endpoint data here as elsewhere. SAM builds this
# layer whatever DurableWorker is (sam build does not evaluate conditions); a deploy with it
# off creates no layer and uploads it nowhere.
define durable_sdk_layer
	$(call layer_install,-r infra/requirements-durable.txt)
	$(drop_runtime_provided)
	find "$(LAYER_SITE)/botocore/data" -name 'examples-1.json' -delete
	$(layer_finish)
endef

build-DependenciesLayer:
	$(dependency_layer)

build-DurableSdkLayer:
	$(durable_sdk_layer)

build-ApiFunction:
	$(function_artifact)

build-PollFunction:
	$(function_artifact)

build-WorkerFunction:
	$(function_artifact)

build-DurableWorkerFunction:
	$(function_artifact)

build-WorkerFailureFunction:
	$(function_artifact)

build-RedriveFunction:
	$(function_artifact)

build-QueueWorkerFunction:
	$(function_artifact)

build-DeadLetterFunction:
	$(function_artifact)

$(SAM_VENV)/.installed: infra/requirements-sam.txt
	@test -x $(SAM_VENV)/bin/python || $(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(SAM_VENV)/bin/python -m pip install --quiet -r infra/requirements-sam.txt
	@touch $@

# sam validate --lint, and cfn-lint on the template as the SAM translator expands it (which
# catches SAM-level values such as a Timeout over 900 that the first check cannot see), with
# DurableWorker off (the default) and on (its function exists only then), and with a Workflow
# (PollFunction exists only then).
template-check: $(SAM_VENV)/.installed
	$(SAM_ENV) $(SAM) validate --lint --template template.yaml
	$(SAM_ENV) $(SAM_VENV)/bin/python infra/transform.py template.yaml > .aws-sam-transformed.json
	$(SAM_ENV) $(SAM_VENV)/bin/cfn-lint .aws-sam-transformed.json
	$(SAM_ENV) $(SAM_VENV)/bin/python infra/transform.py template.yaml --parameter DurableWorker=true > .aws-sam-transformed.json
	$(SAM_ENV) $(SAM_VENV)/bin/cfn-lint .aws-sam-transformed.json
	$(SAM_ENV) $(SAM_VENV)/bin/python infra/transform.py template.yaml --parameter Workflow=examples.osmosis03.workflow:AnswerWorkflow > .aws-sam-transformed.json
	$(SAM_ENV) $(SAM_VENV)/bin/cfn-lint .aws-sam-transformed.json
	@rm -f .aws-sam-transformed.json

# Build the deployable artifacts: the dependency layer once, then each function's code (needs
# python$(LAMBDA_PYTHON) on PATH, e.g. PYENV_VERSION=3.13.0).
build-lambda: $(SAM_VENV)/.installed
	$(SAM_ENV) $(SAM) build --template template.yaml --build-in-source

# Each function's size, its code plus its layers (boto3 is in neither: the runtime provides it),
# and an import check with the runtime's Python. Needs python$(LAMBDA_PYTHON) on PATH
# (PYENV_VERSION=3.13.0).
package: $(STAMP) build-lambda
	$(BIN)/python -m bench.package --build-dir .aws-sam/build --python python$(LAMBDA_PYTHON)

.PHONY: package build-DependenciesLayer build-DurableSdkLayer build-ApiFunction build-PollFunction build-WorkerFunction build-DurableWorkerFunction build-WorkerFailureFunction build-RedriveFunction build-QueueWorkerFunction build-DeadLetterFunction template-check build-lambda
