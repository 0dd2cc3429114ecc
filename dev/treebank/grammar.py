#!/usr/bin/env python3
"""The project's own treebank: a small random grammar that writes Penn-Treebank-style trees.

The Penn Treebank sample's licence keeps it out of this repository, so the default test suite
parses, trains on and scores these trees instead. They are written as the treebank writes its
`.mrg` files (`( (S ...) )` with an empty root label, one constituent per line, indented) and hold
what the readers, the preprocessing and EVALB must handle: function tags and indices (`NP-SBJ-1`,
`PP-LOC=2`), empty elements (`-NONE-` traces, `0` complementisers, `*U*`), every punctuation tag
(`,` `.` `:` quotes, `-LRB-`/`-RRB-`, `$`, `#`), unary chains (clauses whose subject is a trace,
`NP` over `NP`, `ADVP` over one adverb), `ADVP`/`PRT`, deep nesting and sentences of 40 to 90
tokens. The words are ordinary English words and invented names; nothing comes from a treebank.

    python3 dev/treebank/grammar.py                    # writes tests/treebank/own_0001.mrg ... own_0040.mrg
    python3 dev/treebank/grammar.py --out DIR --files 40 --seed 2026

Deterministic: the same seed gives the same files byte for byte (Python's Mersenne Twister, used
only through `random()`, whose sequence is fixed across Python 3 versions). Standard library only.
"""

import argparse
import os
import random
import sys

# ---------------------------------------------------------------------------------------------
# The lexicon: (word, ...) per tag. Verbs are (base, 3rd singular, past, past participle, -ing).

DT = ["the", "the", "the", "a", "a", "this", "that", "every", "some", "no", "another"]
NN = [
    "board", "company", "river", "report", "teacher", "market", "garden", "village", "bridge", "museum",
    "council", "factory", "farmer", "engineer", "season", "contract", "price", "plan", "storm", "library",
    "road", "school", "painter", "festival", "orchestra", "harbor", "mayor", "ferry", "bakery", "tunnel",
    "printer", "budget", "lawyer", "hospital", "railway", "island", "kitchen", "winter", "summer", "forest",
    "election", "program", "studio", "station", "market", "dispute", "vote", "proposal", "shipment", "design",
]
NNS = [
    "boards", "companies", "rivers", "reports", "teachers", "markets", "gardens", "villages", "bridges",
    "farmers", "engineers", "contracts", "prices", "plans", "storms", "roads", "schools", "painters",
    "ferries", "tunnels", "lawyers", "islands", "elections", "programs", "stations", "shares", "workers",
    "visitors", "students", "neighbors", "orders", "tickets", "records", "buyers", "owners", "musicians",
]
NNP_FIRST = ["Mara", "Tobias", "Ilse", "Corin", "Dalia", "Emery", "Fenna", "Gideon", "Hester", "Ivo",
             "Jonas", "Kirsi", "Lorcan", "Mireille", "Nilo", "Odette", "Pavel", "Quilla", "Rosamund", "Soren"]
NNP_LAST = ["Alder", "Brenna", "Corvale", "Dunmore", "Elsworth", "Farrow", "Galloway", "Hollis", "Iverna",
            "Jessop", "Kestrel", "Lomond", "Marlow", "Nettleton", "Orwin", "Pellham", "Quarry", "Redfern"]
NNP_PLACE = ["Ashford", "Bramley", "Calder", "Dunholm", "Eastmere", "Fallowby", "Greywater", "Halden",
             "Inverley", "Juniper", "Kelso", "Larkhill", "Millbrook", "Northwold", "Oakhurst", "Penrose"]
NNP_FIRM_SUFFIX = ["Corp.", "Inc.", "Co.", "Group", "Holdings", "Industries"]
TITLE = ["Mr.", "Ms.", "Dr.", "Mrs."]
MONTH = ["January", "March", "April", "June", "July", "September", "October", "November"]
DAY = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
JJ = [
    "small", "new", "old", "local", "early", "quiet", "broad", "careful", "annual", "northern", "southern",
    "large", "public", "private", "modest", "steady", "open", "narrow", "heavy", "bright", "rural", "coastal",
    "long", "recent", "final", "strong", "weak", "busy", "wooden", "popular",
]
JJR = ["larger", "smaller", "better", "higher", "lower", "faster"]
JJS = ["largest", "smallest", "best", "highest", "oldest"]
RB = ["also", "quickly", "slowly", "still", "soon", "often", "recently", "already", "nearly", "later",
      "again", "finally", "rarely", "openly", "gently"]
RBR = ["more", "less"]
VERBS_TRANSITIVE = [
    ("build", "builds", "built", "built", "building"),
    ("open", "opens", "opened", "opened", "opening"),
    ("sign", "signs", "signed", "signed", "signing"),
    ("visit", "visits", "visited", "visited", "visiting"),
    ("close", "closes", "closed", "closed", "closing"),
    ("raise", "raises", "raised", "raised", "raising"),
    ("sell", "sells", "sold", "sold", "selling"),
    ("find", "finds", "found", "found", "finding"),
    ("approve", "approves", "approved", "approved", "approving"),
    ("repair", "repairs", "repaired", "repaired", "repairing"),
    ("paint", "paints", "painted", "painted", "painting"),
    ("expand", "expands", "expanded", "expanded", "expanding"),
    ("review", "reviews", "reviewed", "reviewed", "reviewing"),
    ("publish", "publishes", "published", "published", "publishing"),
    ("move", "moves", "moved", "moved", "moving"),
]
VERBS_INTRANSITIVE = [
    ("rise", "rises", "rose", "risen", "rising"),
    ("fall", "falls", "fell", "fallen", "falling"),
    ("arrive", "arrives", "arrived", "arrived", "arriving"),
    ("wait", "waits", "waited", "waited", "waiting"),
    ("grow", "grows", "grew", "grown", "growing"),
    ("return", "returns", "returned", "returned", "returning"),
]
VERBS_SAY = [("say", "says", "said"), ("report", "reports", "reported"), ("announce", "announces", "announced"),
             ("add", "adds", "added"), ("note", "notes", "noted"), ("argue", "argues", "argued")]
VERBS_CONTROL = [("want", "wants", "wanted"), ("agree", "agrees", "agreed"), ("plan", "plans", "planned"),
                 ("hope", "hopes", "hoped"), ("decide", "decides", "decided")]
PHRASAL = [("set", "sets", "set", "up"), ("take", "takes", "took", "over"), ("shut", "shuts", "shut", "down"),
           ("pay", "pays", "paid", "off"), ("give", "gives", "gave", "back"), ("carry", "carries", "carried", "out")]
MD = ["will", "could", "may", "might", "would", "should", "can"]
IN_PLACE = ["in", "near", "at", "outside", "across"]
IN_OTHER = ["of", "for", "with", "from", "under", "about", "against"]
IN_TIME = ["after", "before", "during", "since"]
IN_SUB = ["because", "while", "although", "if", "after", "before"]
CC = ["and", "and", "but", "or"]
CD_SMALL = ["two", "three", "four", "five", "six", "ten", "12", "15", "40", "250"]
CD_AMOUNT = ["1.5", "3", "4.2", "12", "20", "35", "150", "1,200", "2.75"]
CD_YEAR = ["1987", "1990", "1994", "2001", "2019"]
PRP_SUBJ = ["he", "she", "it", "they", "we", "I"]
PRP_POSS = ["its", "their", "his", "her", "our"]
RP = ["up", "out", "down", "off", "back"]


class Gen:
    """Draws trees. A tree is (label, [children]) or (tag, word) where word is a str."""

    def __init__(self, seed):
        self.r = random.Random(seed)
        self.index = 0  # the last co-indexation number used in this tree

    # -- drawing ------------------------------------------------------------------------------
    def p(self, prob):
        return self.r.random() < prob

    def pick(self, items):
        return items[int(self.r.random() * len(items))]

    def between(self, lo, hi):
        return lo + int(self.r.random() * (hi - lo + 1))

    def new_index(self):
        self.index += 1
        return self.index

    # -- noun phrases -------------------------------------------------------------------------
    def name(self):
        kind = self.between(0, 3)
        if kind == 0:
            return ("NP", [("NNP", self.pick(NNP_FIRST)), ("NNP", self.pick(NNP_LAST))])
        if kind == 1:
            return ("NP", [("NNP", self.pick(TITLE)), ("NNP", self.pick(NNP_LAST))])
        if kind == 2:
            return ("NP", [("NNP", self.pick(NNP_PLACE)), ("NNP", self.pick(NNP_FIRM_SUFFIX))])
        return ("NP", [("NNP", self.pick(NNP_PLACE))])

    def simple_np(self, plural=None):
        plural = self.p(0.3) if plural is None else plural
        kids = []
        if plural:
            if self.p(0.3):
                kids.append(("CD", self.pick(CD_SMALL)))
            elif self.p(0.4):
                kids.append(("DT", "the"))
        elif self.p(0.15):
            kids.append(("PRP$", self.pick(PRP_POSS)))
        else:
            kids.append(("DT", self.pick(DT)))
        for _ in range(self.pick([0, 0, 1, 1, 2])):
            kids.append(("JJ", self.pick(JJ)))
        if self.p(0.2):
            kids.append(("NN", self.pick(NN)))
        kids.append(("NNS", self.pick(NNS)) if plural else ("NN", self.pick(NN)))
        return ("NP", kids)

    def money(self):
        if self.p(0.75):
            kids = [("$", "$"), ("CD", self.pick(CD_AMOUNT))]
        else:
            kids = [("#", "#"), ("CD", self.pick(CD_AMOUNT))]
        if self.p(0.6):
            kids.append(("CD", self.pick(["million", "billion"])))
            return ("NP", [("QP", kids), ("-NONE-", "*U*")])
        return ("NP", kids + [("-NONE-", "*U*")])

    def percent(self):
        return ("NP", [("CD", self.pick(CD_AMOUNT)), ("NN", "%")])

    def np(self, depth, role=""):
        """A noun phrase; `role` is a function tag (with its index) or ''."""
        label = "NP" + role
        choice = self.r.random()
        if depth <= 0 or choice < 0.30:
            base = self.pick([self.simple_np, self.simple_np, self.simple_np, self.name])()
            return (label, base[1])
        if choice < 0.36:
            return (label, [("PRP", self.pick(PRP_SUBJ) if role.startswith("-SBJ") else "them")])
        if choice < 0.42:
            m = self.pick([self.money, self.percent])()
            return (label, m[1])
        if choice < 0.62:  # NP over NP and a PP: nesting
            return (label, [self.np(depth - 1), self.pp(depth - 1)])
        if choice < 0.70:  # apposition, with commas inside the NP
            return (label, [self.name(), (",", ","), self.np(depth - 1), (",", ",")])
        if choice < 0.76:  # a parenthesis
            inner = self.pick([self.name, self.percent, self.money])()
            return (label, [self.np(depth - 1), ("PRN", [("-LRB-", "-LRB-"), inner, ("-RRB-", "-RRB-")])])
        if choice < 0.84:  # a relative clause: WHNP-n ... *T*-n
            n = self.new_index()
            head = self.simple_np()
            clause = ("S", [("NP-SBJ", [("-NONE-", "*T*-%d" % n)]), self.vp(depth - 1, "past")])
            return (label, [head, ("SBAR", [("WHNP-%d" % n, [("WDT", self.pick(["which", "that"]))]), clause])])
        if choice < 0.90:  # a possessive
            return (label, [("NP", self.name()[1] + [("POS", "'s")]), ("NN", self.pick(NN))])
        if choice < 0.95:  # a unary NP over NP
            return (label, [self.simple_np()])
        return (label, [self.np(depth - 1), ("CC", self.pick(CC[:2])), self.np(depth - 1)])

    # -- other phrases ------------------------------------------------------------------------
    def pp(self, depth, role=""):
        prep = self.pick(IN_PLACE if role in ("-LOC", "-DIR") else IN_OTHER)
        return ("PP" + role, [("IN", prep), self.np(depth - 1)])

    def pp_time(self):
        if self.p(0.5):
            return ("PP-TMP", [("IN", self.pick(IN_TIME)), ("NP", [("NNP", self.pick(MONTH)), ("CD", self.pick(CD_YEAR))])])
        return ("NP-TMP", [("NNP", self.pick(DAY))])

    def advp(self, role=""):
        if self.p(0.2):
            return ("ADVP" + role, [("RBR", self.pick(RBR)), ("RB", self.pick(RB))])
        return ("ADVP" + role, [("RB", self.pick(RB))])

    def adjp(self, depth):
        if depth > 0 and self.p(0.3):
            return ("ADJP-PRD", [("JJ", self.pick(JJ)), self.pp(depth - 1)])
        if self.p(0.3):
            return ("ADJP-PRD", [("RB", self.pick(["very", "quite", "rather"])), ("JJ", self.pick(JJ))])
        if self.p(0.2):
            return ("ADJP-PRD", [("JJR", self.pick(JJR)), ("PP", [("IN", "than"), ("NP", [("NN", "expected")])])])
        return ("ADJP-PRD", [("JJ", self.pick(JJ))])

    def verb(self, forms, tense):
        """(tag, word) of a verb in `tense`: past, present (3rd singular), base, participle."""
        if tense == "past":
            return ("VBD", forms[2])
        if tense == "present":
            return ("VBZ", forms[1])
        if tense == "plural":
            return ("VBP", forms[0])
        return ("VB", forms[0])

    def vp(self, depth, tense):
        """A verb phrase in `tense` (past, present, plural or base)."""
        if tense != "base" and self.p(0.15):  # a modal over a base VP
            return ("VP", [("MD", self.pick(MD)), self.vp(depth, "base")])
        if tense == "past" and self.p(0.08):  # not
            return ("VP", [("VBD", "did"), ("RB", self.pick(["not", "n't"])), self.vp(depth, "base")])
        choice = self.r.random()
        if depth <= 0 or choice < 0.30:
            forms = self.pick(VERBS_TRANSITIVE)
            kids = [self.verb(forms, tense), self.np(0)]
            if self.p(0.3):
                kids.append(self.advp(self.pick(["", "-MNR", "-TMP"])))
            return ("VP", kids)
        if choice < 0.42:
            forms = self.pick(VERBS_TRANSITIVE)
            kids = [self.verb(forms, tense), self.np(depth - 1), self.pp(depth - 1, self.pick(["-LOC", "-CLR", "-DIR"]))]
            if self.p(0.3):
                kids.append(self.pp_time())
            return ("VP", kids)
        if choice < 0.50:  # a phrasal verb: PRT
            v = self.pick(PHRASAL)
            forms = (v[0], v[1], v[2])
            return ("VP", [self.verb(forms, tense), ("PRT", [("RP", v[3])]), self.np(depth - 1)])
        if choice < 0.57:
            forms = self.pick(VERBS_INTRANSITIVE)
            kids = [self.verb(forms, tense)]
            if self.p(0.5):
                kids.append(self.pp(depth - 1, "-DIR"))
            else:
                kids.append(self.advp("-TMP"))
            return ("VP", kids)
        if choice < 0.67:  # says that S / says 0 S
            v = self.pick(VERBS_SAY)
            if self.p(0.5):
                comp = ("SBAR", [("IN", "that"), self.clause(depth - 1)])
            else:
                comp = ("SBAR", [("-NONE-", "0"), self.clause(depth - 1)])
            return ("VP", [self.verb(v + (v[2],), tense), comp])
        if choice < 0.75:  # to be + ADJP / NP-PRD
            be = {"past": ("VBD", "was"), "present": ("VBZ", "is"), "plural": ("VBP", "are"), "base": ("VB", "be")}[tense]
            if self.p(0.5):
                return ("VP", [be, self.adjp(depth - 1)])
            return ("VP", [be, ("NP-PRD", self.np(depth - 1)[1])])
        if choice < 0.83 and tense != "base":  # control: the subject's trace is the caller's job
            v = self.pick(VERBS_CONTROL)
            return ("VP-CONTROL", [self.verb(v + (v[2],), tense)])
        if choice < 0.91 and tense != "base":  # passive: the object's trace is the caller's job
            forms = self.pick(VERBS_TRANSITIVE)
            be = {"past": ("VBD", "was"), "present": ("VBZ", "is"), "plural": ("VBP", "are")}[tense]
            return ("VP-PASSIVE", [be, ("VBN", forms[3])])
        forms = self.pick(VERBS_TRANSITIVE)
        return ("VP", [self.verb(forms, tense), self.np(depth - 1), ("SBAR-ADV", [("IN", self.pick(IN_SUB)), self.clause(depth - 1)])])

    def finish_vp(self, vp, depth, subject_index):
        """Resolves the control and passive templates, whose traces point at the subject."""
        label, kids = vp
        if label == "VP-CONTROL":
            inner = ("S", [("NP-SBJ", [("-NONE-", "*-%d" % subject_index)]),
                           ("VP", [("TO", "to"), self.finish_vp(self.vp(depth - 1, "base"), depth - 1, None)])])
            return ("VP", kids + [inner])
        if label == "VP-PASSIVE":
            by = []
            if self.p(0.6):
                by = [("PP", [("IN", "by"), ("NP-LGS", self.np(depth - 1)[1])])]
            return ("VP", [kids[0], ("VP", [kids[1], ("NP", [("-NONE-", "*-%d" % subject_index)])] + by)])
        return vp

    def clause(self, depth, tense=None):
        """An S with a subject and a verb phrase (never a template)."""
        tense = tense or self.pick(["past", "past", "present", "plural"])
        if tense == "plural":
            subject = self.simple_np(plural=True)
        else:
            subject = self.np(depth - 1, "-SBJ")
            if subject[1][-1][0] == "NNS" or subject[1][0][1] in ("they", "we", "I"):
                subject = self.simple_np(plural=False)
        vp = self.vp(depth, tense)
        n = None
        if vp[0] in ("VP-CONTROL", "VP-PASSIVE"):
            n = self.new_index()
        role = "-SBJ" + ("-%d" % n if n else "")
        kids = [("NP" + role, subject[1]), self.finish_vp(vp, depth, n)]
        if self.p(0.15):
            kids.insert(1, self.advp())
        return ("S", kids)

    # -- sentences ----------------------------------------------------------------------------
    def sentence(self, depth):
        """A whole tree under the empty root label."""
        self.index = 0
        choice = self.r.random()
        end = (".", self.pick([".", ".", ".", ".", "!", "?"])) if self.p(0.1) else (".", ".")
        if choice < 0.04:  # a fragment
            frag = self.pick([lambda: ("FRAG", [self.np(1), end]), lambda: ("INTJ", [("UH", self.pick(["Yes", "No", "Well"])), (".", ".")])])()
            return ("", [frag])
        if choice < 0.40:
            s = self.clause(depth)
            if self.p(0.3):
                s = ("S", [self.pick([self.pp_time, lambda: self.pp(1, "-LOC"), lambda: self.advp()])(), (",", ",")] + s[1])
            return ("", [("S", s[1] + [end])])
        if choice < 0.52:  # a quotation, topicalised: `` S-TPC-n , '' NP-SBJ said 0 *T*-n .
            n = self.new_index()
            quote = ("S-TPC-%d" % n, self.clause(depth - 1)[1])
            say = self.pick(VERBS_SAY)
            vp = ("VP", [("VBD", say[2]), ("SBAR", [("-NONE-", "0"), ("S", [("-NONE-", "*T*-%d" % n)])])])
            speaker = ("NP-SBJ", self.name()[1])
            if self.p(0.5):
                return ("", [("S", [("``", "``"), quote, (",", ","), ("''", "''"), speaker, vp, (".", ".")])])
            return ("", [("SINV", [("``", "``"), quote, (",", ","), ("''", "''"), vp, speaker, (".", ".")])])
        if choice < 0.64:  # coordination of clauses
            parts = [self.clause(depth - 1)]
            for _ in range(self.pick([1, 1, 2])):
                parts += [(",", ","), ("CC", self.pick(CC))] if self.p(0.6) else [("CC", self.pick(CC))]
                parts.append(self.clause(depth - 1))
            return ("", [("S", parts + [end])])
        if choice < 0.67:  # gapping: the second clause's verb is missing, its parts point at the first's (=n)
            a, b = self.new_index(), self.new_index()
            forms = self.pick(VERBS_TRANSITIVE)
            first = ("S", [("NP-SBJ-%d" % a, self.simple_np(plural=True)[1]),
                           ("VP", [("VBD", forms[2]), ("NP-%d" % b, self.simple_np()[1])])])
            second = ("S", [("NP-SBJ=%d" % a, self.simple_np(plural=True)[1]), ("NP=%d" % b, self.simple_np()[1])])
            return ("", [("S", [first, (",", ","), ("CC", "and"), second, (".", ".")])])
        if choice < 0.70:  # two clauses joined by a colon
            return ("", [("S", [self.clause(depth - 1), (":", self.pick([";", "--"])), self.clause(depth - 1), (".", ".")])])
        if choice < 0.78:  # a subordinate clause first
            sub = ("SBAR-ADV", [("IN", self.pick(IN_SUB)), self.clause(depth - 1)])
            return ("", [("S", [sub, (",", ",")] + self.clause(depth)[1] + [(".", ".")])])
        if choice < 0.84:  # there is / there were
            be = self.pick([("VBD", "was"), ("VBZ", "is")])
            return ("", [("S", [("NP-SBJ", [("EX", "There")]), ("VP", [be, ("NP-PRD", self.np(depth - 1)[1])]), (".", ".")])])
        if choice < 0.88:  # a question
            n = self.new_index()
            sq = ("SQ", [("VBD", "did"), ("NP-SBJ", self.name()[1]),
                         ("VP", [("VB", self.pick(VERBS_TRANSITIVE)[0]), ("NP", [("-NONE-", "*T*-%d" % n)])])])
            return ("", [("SBARQ", [("WHNP-%d" % n, [("WP", "What")]), sq, (".", "?")])])
        if choice < 0.94:  # an imperative, or a headline with a trace subject: S over VP after preprocessing
            vp = self.finish_vp(self.vp(depth, "base"), depth, None)
            return ("", [("S", [("NP-SBJ", [("-NONE-", "*")]), vp, end])])
        # a long sentence: a list of clauses and phrases, with many commas
        parts = [self.clause(depth)]
        for _ in range(self.between(3, 6)):
            parts += [(",", ","), self.clause(max(1, depth - 2))]
        parts[-1:-1] = [("CC", "and")]
        return ("", [("S", parts + [(".", ".")])])


def capitalise(t):
    """Capitalises the first word of the sentence and of every quotation (after ``)."""
    leaves = []

    def walk(n):
        if is_leaf(n):
            leaves.append(n)
        else:
            n[1][:] = [walk(c) for c in n[1]]
        return n

    walk(t)
    up = True
    out = {}
    for i, (tag, word) in enumerate(leaves):
        if tag == "``":
            up = True
        elif tag not in ("-NONE-", ",", ":", "''", "-LRB-") and up:
            up = False
            if tag not in ("NNP", "CD", "$", "#") and word[0].islower():
                out[id(leaves[i])] = (tag, word[0].upper() + word[1:])

    def replace(n):
        if is_leaf(n):
            return out.get(id(n), n)
        return (n[0], [replace(c) for c in n[1]])

    return replace(t)


# ---------------------------------------------------------------------------------------------
# Writing, as the treebank's .mrg files do.

def is_leaf(t):
    return isinstance(t[1], str)


def words(t):
    if is_leaf(t):
        return [] if t[0] == "-NONE-" else [t[1]]
    out = []
    for c in t[1]:
        out += words(c)
    return out


def depth(t):
    return 0 if is_leaf(t) else 1 + max(depth(c) for c in t[1])


def render(t, indent):
    """One constituent as the treebank writes it: preterminals inline until the first phrase,
    every child after a phrase on a line of its own."""
    if is_leaf(t):
        return "(%s %s)" % t
    out = "(" + t[0]
    broke = False
    for c in t[1]:
        if is_leaf(c) and not broke:
            out += " " + render(c, indent)
        else:
            broke = True
            out += " \n" + " " * (indent + 2) + render(c, indent + 2)
    return out + (" )" if is_leaf(t[1][-1]) else ")")


def write_tree(t):
    (top,) = t[1]
    return "( " + render(top, 2) + ")\n"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "treebank"))
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    g = Gen(args.seed)
    os.makedirs(args.out, exist_ok=True)
    total = 0
    for f in range(1, args.files + 1):
        n = g.between(4, 26)
        trees = []
        for _ in range(n):
            d = g.pick([1, 2, 2, 3, 3, 3, 4, 4, 5, 6])
            t = g.sentence(d)
            while not words(t) or len(words(t)) > 90:
                t = g.sentence(d)
            trees.append(capitalise(t))
        path = os.path.join(args.out, "own_%04d.mrg" % f)
        with open(path, "w", encoding="utf-8", newline="\n") as out:
            out.write("\n")
            for t in trees:
                out.write(write_tree(t))
        total += n
    print("%d trees in %d files under %s" % (total, args.files, os.path.normpath(args.out)), file=sys.stderr)


if __name__ == "__main__":
    main()
