"""The S-expression parser: round trips, the tree's shape, and positioned errors."""
from __future__ import annotations

import json

import pytest

from engine.errors import KGQAError
from engine.graph import XSD, Literal
from engine.sexpr import SExprSyntaxError, parse, to_text
from engine.sexpr.parser import MAX_DEPTH
from engine.sexpr.tree import (
    And,
    Chain,
    Class,
    Compare,
    Count,
    Entity,
    Extreme,
    Join,
    Relation,
    Reverse,
    TimeConstraint,
)

FLOAT = XSD + "float"
ROUND_TRIPS = [
    "(JOIN people.person.place_of_birth m.0abc)",
    "(AND film.film (JOIN (R film.actor.film) m.0x))",
    "(COUNT (AND music.genre (JOIN (R music.artist.genre) m.01)))",
    "(ARGMAX (AND sports.sports_team common.topic) (JOIN sports.sports_team.roster sports.sports_team_roster.from))",
    "(ARGMIN m.0a (JOIN (R a.b) (JOIN c.d e.f)))",
    f"(lt people.person.height_meters 1.8^^{FLOAT})",
    f"(ge time.event.start_date 1990^^{XSD}gYear)",
    f"(AND (JOIN a.b 2001-05-04T10:20:30^^{XSD}dateTime) (le a.c 2015-08-10^^{XSD}date))",
    "(TC (JOIN (R g.h.office_holder) m.0b) g.h.from NOW)",
    "(TC (JOIN (R g.h.office_holder) m.0b) g.h.from 2009)",
    '(JOIN directed_by [Tom Hanks])',
    '(JOIN a.b "Country")',
    '(JOIN a.b "Paris, \\"France\\""@en)',
    '(JOIN starred_actors [a \\] b])',
    f'(JOIN a.b "x y"^^{XSD}integer)'.replace('"x y"', "12"),
]


@pytest.mark.parametrize("text", ROUND_TRIPS)
def test_round_trip(text):
    assert to_text(parse(text)) == text


def test_every_shared_sexpression_round_trips(shared_data):
    for name in ("kg_rl_all.json", "std.json", "dev.json"):
        for item in json.loads((shared_data / "sexpr" / name).read_text()):
            assert to_text(parse(item["s_expression"])) == item["s_expression"]


def test_tree_shape():
    tree = parse("(COUNT (AND c.d (JOIN (R a.b) (ARGMAX m.0x (JOIN a.b (R c.e))))))")
    assert tree == Count(
        And(Class("c.d"), Join(Reverse(Relation("a.b")), Extreme("ARGMAX", Entity("m.0x"), Chain(Relation("a.b"), Reverse(Relation("c.e"))))))
    )
    compare = parse(f"(lt a.b 1.50^^{FLOAT})")
    assert isinstance(compare, Compare) and compare.value.literal == Literal.make("1.5", FLOAT)
    assert to_text(compare) == f"(lt a.b 1.50^^{FLOAT})"  # the text as written survives
    assert parse("(TC m.0a b.c.from 2009)") == TimeConstraint(Entity("m.0a"), Relation("b.c.from"), "2009")


@pytest.mark.parametrize(
    "text, position, words",
    [
        ("(JOIN a.b m.0a", 14, "unbalanced"),
        ("(JOIN a.b m.0a))", 15, "after the expression"),
        ("(FOO a.b m.0a)", 1, "unknown operator"),
        ("(JOIN a.b m.0a m.0b)", 15, "found more"),
        ("(JOIN a.b)", 9, "found fewer"),
        ("(AND m.0a)", 9, "found fewer"),
        ("(COUNT (COUNT m.0a))", 8, "outermost"),
        (f"(lt a.b abc^^{XSD}integer)", 8, "bad literal"),
        (f"(lt a.b 1^^{XSD}nonsense)", 8, "unknown datatype"),
        ('(lt a.b "text")', 8, "number or a date"),
        ("(JOIN (AND a b) m.0a)", 7, "(R relation)"),
        ("(JOIN a'b m.0a)", 6, "invalid relation"),
        ("(TC m.0a b.from soon)", 16, "year"),
        ("(R a.b)", 1, "relation is expected"),
        ("", 0, "empty"),
    ],
)
def test_errors_point_at_the_fault(text, position, words):
    with pytest.raises(SExprSyntaxError) as caught:
        parse(text)
    assert caught.value.position == position
    assert words in str(caught.value)
    assert isinstance(caught.value, KGQAError)


def test_nesting_past_the_bound_is_a_syntax_error_at_the_first_level_too_many():
    def nested(depth: int) -> str:
        return "(JOIN c.d " * depth + "m.0a" + ")" * depth

    assert to_text(parse(nested(MAX_DEPTH))) == nested(MAX_DEPTH)
    for text in (nested(MAX_DEPTH + 1), nested(2_000), "(" * 2_000, ")" * 100 + "(JOIN a.b " * 2_000):
        with pytest.raises(SExprSyntaxError, match=f"more than {MAX_DEPTH} levels") as caught:
            parse(text)
        assert text[caught.value.position] == "("
