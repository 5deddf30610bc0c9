package shard

import (
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/leaseledger/ledger"
)

// PlaceFunc says which shard holds a target's deliveries: an index into
// the shards the ledger was built with (and those added since). It must
// answer the same for the same target for as long as the target has open
// work on that shard; see the package overview for how to change it.
type PlaceFunc func(target ledger.Target) int

// Hash places targets by a 64-bit hash of their name over the first n
// shards. It is the default placement, over the shards given to New. Its
// answers depend on n, so a ledger that grows keeps Hash over its old
// count and pins new targets on the new shards (see Pinned), or moves
// the targets whose answer changed (see Ledger.Move).
func Hash(n int) PlaceFunc {
	return func(target ledger.Target) int { return int(hash(string(target)) % uint64(n)) }
}

// Pinned places the targets named in pins on the shard given for them and
// every other target where fallback places it. It copies pins: changing
// the map afterwards changes nothing.
func Pinned(pins map[ledger.Target]int, fallback PlaceFunc) PlaceFunc {
	own := make(map[ledger.Target]int, len(pins))
	for t, i := range pins {
		own[t] = i
	}
	return func(target ledger.Target) int {
		if i, ok := own[target]; ok {
			return i
		}
		return fallback(target)
	}
}

// hash is FNV-1a, 64 bits, stable across processes and versions, then
// the splitmix64 finaliser: FNV alone leaves names that differ only in a
// last character (host-1, host-2) close in the low bits a modulus reads.
func hash(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	z := h.Sum64()
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	z ^= z >> 31
	return z
}

// tokenSep separates the shard index from the store's own token. Stores
// mint tokens with crypto/rand.Text (base32, A-Z and 2-7), so the
// separator never occurs in one.
const tokenSep = "~"

// wrapToken is the token the caller holds: the shard's index, then the
// token the shard minted. The shard's part keeps all its randomness, so
// the whole is as unguessable as the store's own; the index only routes,
// and grants nothing.
func wrapToken(shard int, t ledger.Token) ledger.Token {
	return ledger.Token(strconv.Itoa(shard) + tokenSep + string(t))
}

// unwrapToken splits a token made by wrapToken. ok is false for any
// other token (a forged or foreign one), which the caller then routes by
// record ID and hands to the store unchanged, to be answered as the store
// answers any token it never minted.
func unwrapToken(t ledger.Token, shards int) (shard int, inner ledger.Token, ok bool) {
	head, tail, found := strings.Cut(string(t), tokenSep)
	if !found || tail == "" {
		return 0, t, false
	}
	i, err := strconv.Atoi(head)
	if err != nil || i < 0 || i >= shards || strconv.Itoa(i) != head {
		return 0, t, false
	}
	return i, ledger.Token(tail), true
}
