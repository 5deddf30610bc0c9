package ledger

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadmeGoBlocksCompile keeps the README's code true, and that of
// docs/production.md: every ```go block is a whole file, and each is compiled as a package of its own
// inside this module, through an overlay, so nothing is written into the
// tree; the blocks that import the OpenTelemetry module are compiled in
// that module, by its own test.
func TestReadmeGoBlocksCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the README's examples with the go command")
	}
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go command builds the README's blocks")
	// docs/production.md holds the README's longer examples: its blocks
	// are kept as true as the README's.
	var md strings.Builder
	for _, file := range []string{"README.md", "docs/production.md"} {
		text, err := os.ReadFile(file)
		require.NoError(t, err)
		md.Write(text)
		md.WriteString("\n")
	}
	var blocks []string
	for _, b := range goBlocks(md.String()) {
		// A block that uses the OpenTelemetry module is built by that
		// module's own test (otel/readme_test.go), where its
		// dependencies are; this module has none of them.
		if !strings.Contains(b, `"github.com/leaseledger/ledger/otel"`) {
			blocks = append(blocks, b)
		}
	}
	require.NotEmpty(t, blocks)

	root, err := filepath.Abs(".")
	require.NoError(t, err)
	tmp := t.TempDir()
	overlay := map[string]string{}
	var pkgs, testPkgs []string
	for i, b := range blocks {
		header, _, _ := strings.Cut(b, "\n")
		require.True(t, strings.HasPrefix(header, "package "), "README Go block %d must be a whole file, starting with its package clause:\n%s", i+1, b)
		file := "block.go"
		if strings.HasSuffix(header, "_test") {
			file = "block_test.go"
		}
		src := filepath.Join(tmp, fmt.Sprintf("block%02d.go", i+1))
		require.NoError(t, os.WriteFile(src, []byte(b), 0o644))
		dir := fmt.Sprintf("internal/readmeblocks/b%02d", i+1)
		overlay[filepath.Join(root, dir, file)] = src
		if file == "block_test.go" {
			testPkgs = append(testPkgs, "./"+dir)
		} else {
			pkgs = append(pkgs, "./"+dir)
		}
	}
	spec, err := json.Marshal(map[string]any{"Replace": overlay})
	require.NoError(t, err)
	specPath := filepath.Join(tmp, "overlay.json")
	require.NoError(t, os.WriteFile(specPath, spec, 0o644))

	// Build, not vet: vet runs in each package's directory, which the
	// overlay does not make. Test files are compiled into test binaries
	// that are never run.
	for _, run := range []struct {
		args, pkgs []string
	}{
		{[]string{"build", "-overlay", specPath, "-o", os.DevNull}, pkgs},
		{[]string{"test", "-vet=off", "-overlay", specPath, "-c", "-o", tmp + string(filepath.Separator)}, testPkgs},
	} {
		if len(run.pkgs) == 0 {
			continue
		}
		args := append(run.args, run.pkgs...)
		cmd := exec.Command(goTool, args...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "the README's Go blocks do not build (go %s):\n%s", args[0], out)
	}
}

// goBlocks returns the bodies of the ```go blocks of a Markdown text.
func goBlocks(md string) []string {
	var blocks []string
	var cur *strings.Builder
	for line := range strings.Lines(md) {
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &strings.Builder{}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line)
		}
	}
	return blocks
}

// TestReadmeIsForUsers keeps development history off the front page:
// it belongs in docs/performance.md and the changelog.
func TestReadmeIsForUsers(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	// A page to decide from: the detail lives in docs/, and nothing
	// points outside the repository.
	assert.LessOrEqual(t, strings.Count(string(readme), "\n"), 400, "the README is at most 400 lines")
	for _, doc := range []string{"README.md", "docs/performance.md", "docs/production.md", "docs/operations.md", "docs/guarantees.md"} {
		text, err := os.ReadFile(doc)
		require.NoError(t, err)
		assert.NotContains(t, string(text), "../shared", "%s points outside the repository", doc)
	}
	for _, word := range []string{"FAIL", "not met", "this round", "previous round", "DATABASE_URL\")"} {
		if word == "DATABASE_URL\")" {
			assert.NotContains(t, strings.ReplaceAll(string(readme), "LEDGER_DATABASE_URL", ""), word,
				"the README's code reads LEDGER_DATABASE_URL, as ledgerctl does")
			continue
		}
		assert.NotContains(t, string(readme), word)
	}
}
