import Foundation
@testable import NimbusSync
import Testing

@Suite("Ignore rules")
struct IgnoreRulesTests {
    @Test("built-in temporary and editor files are ignored at any depth; ordinary files are not")
    func builtIns() {
        let rules = IgnoreRules(patterns: [])
        for path in [".DS_Store", "a/Thumbs.db", "notes.txt.swp", "x/y/report.tmp", "draft~", ".#lock", "#auto#", "big.iso.part",
            ".nimbus-partial-1234", ".~lock.sheet.ods#"]
        {
            #expect(rules.ignores(path, isDirectory: false), "\(path)")
        }
        for path in ["notes.txt", "a/b/c.md", "tmp", "partial", "swp/file"] {
            #expect(!rules.ignores(path, isDirectory: false), "\(path)")
        }
    }

    @Test("gitignore syntax: names at any depth, anchored paths, folders only, negation, ** and classes")
    func syntax() {
        let rules = IgnoreRules(patterns: [
            "# a comment", "", "*.log", "!keep.log", "/build", "cache/", "docs/*.pdf", "**/secret", "data?.csv", "[ab]x.txt",
        ])
        #expect(rules.ignores("server.log", isDirectory: false))
        #expect(rules.ignores("deep/down/server.log", isDirectory: false))
        #expect(!rules.ignores("keep.log", isDirectory: false), "the last matching rule wins")
        #expect(rules.ignores("build", isDirectory: true))
        #expect(!rules.ignores("src/build", isDirectory: true), "a leading / anchors at the root")
        #expect(rules.ignores("cache", isDirectory: true))
        #expect(!rules.ignores("cache", isDirectory: false), "a trailing / is for folders only")
        #expect(rules.ignores("docs/a.pdf", isDirectory: false))
        #expect(!rules.ignores("docs/sub/a.pdf", isDirectory: false), "* does not cross folders")
        #expect(!rules.ignores("other/docs/a.pdf", isDirectory: false))
        #expect(rules.ignores("secret", isDirectory: false))
        #expect(rules.ignores("a/b/secret", isDirectory: false))
        #expect(rules.ignores("data1.csv", isDirectory: false))
        #expect(!rules.ignores("data12.csv", isDirectory: false))
        #expect(rules.ignores("bx.txt", isDirectory: false))
        #expect(!rules.ignores("cx.txt", isDirectory: false))
    }

    @Test("the literal fast path decides exactly as the regular expression does")
    func literalMatchesRegex() throws {
        let patterns = ["*.tmp", "~$*", "exact.txt", "/top/*.md", "a*b", "*", "dir/file", ".#*", "*~"]
        let subjects = ["x.tmp", ".tmp", "x.tmpx", "~$doc", "~", "exact.txt", "exact.txt2", "top/a.md", "top/s/a.md", "ab", "axxb", "ba",
            "dir/file", "dir/file2", ".#x", "x~", "", "top/.md"]
        for pattern in patterns {
            let rule = try #require(IgnoreRules.rule(pattern))
            #expect(rule.literal != nil, "\(pattern) takes the fast path")
            for subject in subjects where !(rule.anchored == false && subject.contains("/")) {
                let single = IgnoreRules(patterns: [pattern])
                let viaRegex = rule.regex.firstMatch(in: subject, range: NSRange(subject.startIndex..., in: subject)) != nil
                let builtInsSay = IgnoreRules(patterns: []).ignores(subject, isDirectory: false)
                #expect(single.ignores(subject, isDirectory: false) == (viaRegex || builtInsSay), "\(pattern) on \(subject)")
            }
        }
    }
}
