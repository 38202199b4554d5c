#!/usr/bin/python3
"""A small English text for the `text` task, generated (so it is free of any
copyright and the same on every machine): short stories from a fixed grammar,
one sentence after another, paragraphs separated by a blank line.

    /usr/bin/python3 tools/make_text.py OUT.txt [--chars N] [--seed S]

Default: 60000 characters, seed 0 (configs/text/stories.txt was written so).
The grammar has a few dozen words and fixed sentence shapes, so a small
character model learns its spelling, its word order and some of its agreement
(a name, once introduced, returns later in the paragraph) in about a minute.
"""
import argparse
import random

NAMES = ["Anna", "Ben", "Clara", "David", "Ella", "Finn"]
ANIMALS = ["cat", "dog", "bird", "fox", "horse", "rabbit"]
COLOURS = ["red", "green", "blue", "yellow", "white", "small"]
THINGS = ["ball", "box", "kite", "book", "hat", "cup"]
PLACES = ["the garden", "the river", "the forest", "the market", "the hill", "the house"]
VERBS = ["saw", "found", "lost", "carried", "painted", "wanted"]
MOODS = ["happy", "tired", "hungry", "quiet", "brave", "sleepy"]


def paragraph(rng):
    name, animal, other = rng.choice(NAMES), rng.choice(ANIMALS), rng.choice(NAMES)
    thing, colour = rng.choice(THINGS), rng.choice(COLOURS)
    lines = [f"{name} had a {animal}.",
             f"One day {name} went to {rng.choice(PLACES)} with the {animal}."]
    for _ in range(rng.randint(2, 4)):
        shape = rng.randrange(4)
        if shape == 0:
            lines.append(f"The {animal} {rng.choice(VERBS)} a {colour} {thing}.")
        elif shape == 1:
            lines.append(f"{name} met {other} near {rng.choice(PLACES)}.")
        elif shape == 2:
            lines.append(f"{other} said, \"Your {animal} looks {rng.choice(MOODS)}.\"")
        else:
            lines.append(f"Then {name} {rng.choice(VERBS)} the {colour} {thing}.")
    lines.append(f"In the evening {name} and the {animal} went home, {rng.choice(MOODS)} and glad.")
    return " ".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--chars", type=int, default=60000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    text = ""
    while len(text) < args.chars:
        text += paragraph(rng) + "\n\n"
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text[:args.chars])
    print(f"wrote {args.out}: {min(len(text), args.chars)} characters")


if __name__ == "__main__":
    main()
