# Borough. `make image` builds out/borough.img; `make test` runs every test:
# unit tests, then boot tests of the real image under QEMU, then a
# reproducibility check. See README.md.

SHELL := /bin/bash
OUT ?= out
GO ?= go
export BOROUGH_OUT := $(abspath $(OUT))

.PHONY: image run test unit boot check-image check-release reproducible bench robustness soak lint clean

image:
	OUT=$(OUT) ./build.sh

run: image
	qemu/run.sh $(OUT)/borough.img

test: lint unit boot check-image check-release reproducible

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags boot ./boottest/

unit:
	$(GO) test ./...

# boottest/run.sh says in which order and beside what each runs.
boot: image
	GO=$(GO) boottest/run.sh

# The image's GPT must satisfy sgdisk's checks.
check-image: image
	@report=$$(sgdisk -v $(OUT)/borough.img); echo "$$report"; \
		grep -q 'No problems found' <<<"$$report"

# The image users get has no test hooks: its node and init binaries, which
# the image carries, must not even name them.
check-release: image
	@if grep -l 'borough\.test' $(OUT)/node $(OUT)/init; then \
		echo "release binaries above contain borough.test strings (test hooks)"; exit 1; fi
	@grep -q 'borough\.test' $(OUT)/test/node || { echo "the test build has no test hooks"; exit 1; }
	@echo "check-release: no test hooks in the release image's binaries"

# Two builds from the same checkout must give byte-identical images.
reproducible: image
	rm -rf $(OUT)/repro
	OUT=$(OUT)/repro ./build.sh
	cmp $(OUT)/borough.img $(OUT)/repro/borough.img
	cmp $(OUT)/borough.efi $(OUT)/repro/borough.efi
	@echo "reproducible: two builds of borough.img are byte-identical"

bench: image
	./bench/build.sh
	$(GO) test -run '^$$' -bench . ./internal/logtree/ ./internal/nodeapi/
	$(GO) test -run '^$$' -bench . -benchtime 1x ./internal/cluster/ ./internal/consensus/
	$(GO) test -tags boot -run '^$$' -bench . -benchtime 1x -timeout 90m -v ./boottest/

# The fault-injection suite on its own, for longer: SEED= reruns a schedule,
# DURATION= is how long faults go on, NODES= 3 or 5. make test runs one
# short seed of it (TestRobustness with its defaults).
SEED ?= $(shell date +%s)
DURATION ?= 20m
NODES ?= 3
robustness: image
	SEED=$(SEED) DURATION=$(DURATION) NODES=$(NODES) \
		$(GO) test -tags boot -count=1 -run '^TestRobustness$$' -timeout 150m -v ./boottest/

# The soak on its own: HOURS= how long (1 by default), a three-node cluster
# under a steady load, a rolling restart and a defragmentation every 10
# minutes, and a table of each node's memory, goroutines, open files,
# database and volume use by window, which must stay flat.
HOURS ?= 1
soak: image
	HOURS=$(HOURS) $(GO) test -tags boot -count=1 -run '^TestSoak$$' \
		-timeout $(shell awk 'BEGIN { print int($(HOURS) * 60 + 30) }')m -v ./boottest/

clean:
	rm -rf $(OUT)
