package pgstore

import (
	"errors"
	"strings"
)

// splitStatements splits a migration file into its statements, each
// without its terminating semicolon and without the comments and blank
// lines before it. It knows enough of PostgreSQL's lexical rules not to
// split inside a comment (--, nested /* */), a string ('...', E'...'), a
// quoted identifier or a dollar-quoted body ($tag$...$tag$).
func splitStatements(sql string) ([]string, error) {
	var stmts []string
	start := -1 // the current statement's first byte, -1 before it
	for i := 0; i < len(sql); {
		c := sql[i]
		next := byte(0)
		if i+1 < len(sql) {
			next = sql[i+1]
		}
		var end int // the first byte after the token at i
		switch {
		case c == '-' && next == '-':
			end = strings.IndexByte(sql[i:], '\n')
			if end < 0 {
				end = len(sql)
			} else {
				end += i + 1
			}
		case c == '/' && next == '*':
			depth, j := 0, i
			for j < len(sql) {
				switch {
				case strings.HasPrefix(sql[j:], "/*"):
					depth++
					j += 2
				case strings.HasPrefix(sql[j:], "*/"):
					depth--
					j += 2
				default:
					j++
				}
				if depth == 0 {
					break
				}
			}
			if depth != 0 {
				return nil, errors.New("unterminated /* comment")
			}
			end = j
		case c == '\'' || c == '"':
			// E'...' strings take backslash escapes; the E is the byte
			// before, not part of an identifier.
			escapes := c == '\'' && i > 0 && (sql[i-1] == 'E' || sql[i-1] == 'e') && (i < 2 || !identByte(sql[i-2]))
			j := i + 1
			for ; j < len(sql); j++ {
				if escapes && sql[j] == '\\' {
					j++
					continue
				}
				if sql[j] == c {
					if j+1 < len(sql) && sql[j+1] == c {
						j++ // a doubled quote stands for itself
						continue
					}
					break
				}
			}
			if j >= len(sql) {
				return nil, errors.New("unterminated quoted string or identifier")
			}
			end = j + 1
		case c == '$' && (i == 0 || !identByte(sql[i-1])):
			tag, ok := dollarTag(sql[i:])
			if !ok {
				end = i + 1 // a parameter ($1) or a lone dollar
				break
			}
			closing := strings.Index(sql[i+len(tag):], tag)
			if closing < 0 {
				return nil, errors.New("unterminated dollar-quoted string " + tag)
			}
			end = i + len(tag) + closing + len(tag)
		case c == ';':
			if start >= 0 {
				stmts = append(stmts, strings.TrimSpace(sql[start:i]))
				start = -1
			}
			end = i + 1
		default:
			end = i + 1
		}
		isComment := (c == '-' && next == '-') || (c == '/' && next == '*')
		if start < 0 && !isComment && !isSpace(c) && c != ';' {
			start = i
		}
		i = end
	}
	if start >= 0 {
		stmts = append(stmts, strings.TrimSpace(sql[start:]))
	}
	return stmts, nil
}

// dollarTag returns the opening tag ($$ or $name$) at the start of s.
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '$':
			return s[:j+1], true
		case c >= '0' && c <= '9':
			if j == 1 {
				return "", false // $1 is a parameter
			}
		case !identByte(c):
			return "", false
		}
	}
	return "", false
}

// identByte reports whether c can be part of an unquoted identifier.
func identByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// indexStatement is what a statement does to indexes, as far as running
// it in or outside a transaction is concerned.
type indexStatement struct {
	create, drop bool // CREATE [UNIQUE] INDEX, DROP INDEX
	concurrently bool // CONCURRENTLY (also REINDEX ... CONCURRENTLY)
	ifExists     bool // IF NOT EXISTS (create) or IF EXISTS (drop)
	// names are the indexes built or dropped, without their schema and
	// unquoted, when the statement names them after IF [NOT] EXISTS.
	names []string
}

// indexStatementOf classifies stmt, a statement as splitStatements
// returns it, by its leading keywords.
func indexStatementOf(stmt string) indexStatement {
	w := strings.Fields(strings.ToUpper(stmt))
	at := func(i int, words ...string) bool {
		if i+len(words) > len(w) {
			return false
		}
		for k, word := range words {
			if w[i+k] != word {
				return false
			}
		}
		return true
	}
	var st indexStatement
	i := 0
	switch {
	case at(0, "CREATE", "INDEX"):
		st.create, i = true, 2
	case at(0, "CREATE", "UNIQUE", "INDEX"):
		st.create, i = true, 3
	case at(0, "DROP", "INDEX"):
		st.drop, i = true, 2
	case at(0, "REINDEX"):
		for _, word := range w {
			st.concurrently = st.concurrently || strings.Trim(word, "()") == "CONCURRENTLY"
		}
		return st
	default:
		return st
	}
	if at(i, "CONCURRENTLY") {
		st.concurrently, i = true, i+1
	}
	switch {
	case st.create && at(i, "IF", "NOT", "EXISTS"):
		st.ifExists, i = true, i+3
		if i < len(w) {
			st.names = []string{indexName(w[i])}
		}
	case st.drop && at(i, "IF", "EXISTS"):
		st.ifExists, i = true, i+2
		for _, list := range w[i:] {
			if list == "CASCADE" || list == "RESTRICT" {
				break
			}
			for name := range strings.SplitSeq(list, ",") {
				if name != "" {
					st.names = append(st.names, indexName(name))
				}
			}
		}
	}
	return st
}

// indexName is the last part of a possibly qualified, possibly quoted
// name, as strings.Fields left it (upper-cased): "{SCHEMA}.X_IDX" and
// "\"X_IDX\"" are both X_IDX.
func indexName(word string) string {
	if k := strings.LastIndexByte(word, '.'); k >= 0 {
		word = word[k+1:]
	}
	return strings.Trim(word, `"`)
}
