package ledgerotel_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// otelImport marks the Go blocks of the library's README that this module
// builds: the library's own test cannot, since they need OpenTelemetry.
const otelImport = `"github.com/leaseledger/ledger/otel"`

// TestReadmeGoBlocksCompile builds every Go block of this module's README
// and those of the library's README that import this module, each a
// whole file compiled as a package of its own inside this module through
// an overlay, so nothing is written into the tree.
func TestReadmeGoBlocksCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the READMEs' examples with the go command")
	}
	goTool, err := exec.LookPath("go")
	require.NoError(t, err)
	var blocks []string
	for _, file := range []string{"README.md", filepath.Join("..", "README.md"), filepath.Join("..", "docs", "production.md")} {
		md, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, b := range goBlocks(string(md)) {
			if file == "README.md" || strings.Contains(b, otelImport) {
				blocks = append(blocks, b)
			}
		}
	}
	// The library's README links here for the example; its blocks and
	// docs/production.md's that import this module are built too.
	require.NotEmpty(t, blocks, "this README's example")

	root, err := filepath.Abs(".")
	require.NoError(t, err)
	tmp := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	for i, b := range blocks {
		header, _, _ := strings.Cut(b, "\n")
		require.True(t, strings.HasPrefix(header, "package "), "Go block %d must be a whole file:\n%s", i+1, b)
		src := filepath.Join(tmp, fmt.Sprintf("block%02d.go", i+1))
		require.NoError(t, os.WriteFile(src, []byte(b), 0o644))
		dir := fmt.Sprintf("internal/readmeblocks/b%02d", i+1)
		overlay[filepath.Join(root, dir, "block.go")] = src
		pkgs = append(pkgs, "./"+dir)
	}
	spec, err := json.Marshal(map[string]any{"Replace": overlay})
	require.NoError(t, err)
	specPath := filepath.Join(tmp, "overlay.json")
	require.NoError(t, os.WriteFile(specPath, spec, 0o644))
	cmd := exec.Command(goTool, append([]string{"build", "-overlay", specPath, "-o", os.DevNull}, pkgs...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the READMEs' Go blocks do not build:\n%s", out)
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
