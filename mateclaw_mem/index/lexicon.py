"""A small everyday English category lexicon: hypernym <-> member expansion for message search.

Why: the commonest miss left in lexical conversational retrieval is a question and its evidence
that share no word because one names the category and the other a member - "What pets does she
have?" vs "my turtles love the sun", "Which cities has he visited?" vs "Chicago was amazing",
"What instruments does she play?" vs "I practise the violin every day".

The data is written from general knowledge (everyday categories a chat assistant's user talks
about), not from any benchmark's questions, and it is applied uniformly: a query word that names a
category also matches the category's members at a low weight, and a query word that is a member
also matches the category's own names at a lower weight. Entries go through the shared tokenizer
(`index.tokenizer.tokenize`), so "cities" meets "city" and "turtles" meets "turtle" the same way
the index stems them. Multi-word members are written by their distinctive word ("york", not
"new york") so no generic word ("new", "united") becomes an expansion.

Public API: `related(tokens) -> {token: {related term: weight}}` (see its docstring); `GROUPS`.
"""

from __future__ import annotations

from functools import lru_cache

from mateclaw_mem.index.tokenizer import STOPWORDS, tokenize

# name -> (category words, members). Category words are what a question uses to ask about the
# class ("pets", "instruments"); members are the concrete things a conversation mentions. Keep
# members unambiguous in everyday chat: a word that is mostly used in another sense ("play",
# "love", "work", "country" as a music genre) stays out.
GROUPS: dict[str, tuple[str, str]] = {
    "children": (
        "child children kid kids offspring",
        "son sons daughter daughters baby babies toddler toddlers boy boys girl girls teenager teen"
        " newborn infant stepson stepdaughter",
    ),
    "parents": ("parent parents", "mom mum mommy mother dad daddy father stepmom stepdad"),
    "siblings": ("sibling siblings", "brother brothers sister sisters twin twins"),
    "spouse": (
        "spouse partner partners",
        "husband wife boyfriend girlfriend fiance fiancee hubby",
    ),
    "family": (
        "family families relative relatives",
        "mom mum mother dad father parents son daughter kids children baby brother sister husband"
        " wife grandma grandmother grandpa grandfather grandparents grandkids grandson granddaughter"
        " aunt uncle cousin cousins niece nephew fam folks",
    ),
    "pets": (
        "pet pets",
        "dog dogs puppy puppies pup cat cats kitten kittens turtle turtles tortoise hamster hamsters"
        " rabbit rabbits bunny goldfish fish parrot parakeet budgie snake lizard gecko iguana ferret"
        " guinea gerbil horse pony chinchilla hedgehog",
    ),
    "animals": (
        "animal animals wildlife creature creatures",
        "dog cat turtle horse bird birds rabbit fish snake lion tiger bear elephant giraffe zebra"
        " monkey wolf fox deer owl eagle dolphin whale shark penguin squirrel duck cow pig sheep"
        " goat chicken butterfly bee frog",
    ),
    "instruments": (
        "instrument instruments",
        "piano guitar violin cello viola drum drums flute clarinet saxophone sax trumpet trombone"
        " tuba ukulele harp keyboard banjo harmonica accordion oboe bassoon mandolin synthesizer"
        " xylophone bass",
    ),
    "music_genres": (
        "genre genres",
        "jazz rock pop classical hip hop rap blues folk opera reggae metal punk indie edm techno"
        " soul funk gospel r&b",
    ),
    "sports": (
        "sport sports athletics",
        "soccer football basketball baseball tennis golf swimming hockey volleyball cricket rugby"
        " skiing snowboarding surfing cycling boxing wrestling badminton softball lacrosse"
        " skateboarding skating gymnastics karate judo taekwondo marathon triathlon climbing"
        " rowing kayaking fencing archery bowling",
    ),
    "martial_arts": (
        "martial",
        "karate judo taekwondo kickboxing boxing jiujitsu kungfu aikido mma wrestling",
    ),
    "activities": (
        "activity activities",
        "hiking camping swimming running biking cycling painting drawing pottery baking cooking"
        " dancing singing reading gardening fishing skiing surfing yoga climbing kayaking"
        " volunteering games sports",
    ),
    "exercise": (
        "exercise exercises workout workouts fitness",
        "gym running jogging yoga pilates weightlifting lifting cardio swimming cycling hiking"
        " stretching crossfit treadmill spinning aerobics",
    ),
    "hobbies": (
        "hobby hobbies pastime pastimes",
        "painting drawing reading writing gardening cooking baking knitting crocheting sewing"
        " photography hiking fishing camping dancing singing pottery sculpting woodworking chess"
        " gaming collecting journaling birdwatching scrapbooking calligraphy origami embroidery"
        " quilting puzzles",
    ),
    "art": (
        "art arts artwork artworks artistic",
        "painting paintings drawing drawings sketch sketches sculpture sculptures pottery ceramics"
        " photography photo mural murals portrait portraits canvas watercolor watercolour acrylic"
        " collage illustration poetry poem poems dance theater theatre",
    ),
    "food": (
        "food foods meal meals dish dishes cuisine",
        "pizza pasta spaghetti lasagna burger burgers sandwich salad soup sushi taco tacos burrito"
        " rice noodles ramen bread cake cookies pie curry steak chicken fish seafood eggs pancakes"
        " waffles cereal cheese dumplings stew barbecue bbq",
    ),
    "desserts": (
        "dessert desserts sweets treat treats",
        "cake cakes cookie cookies pie pies cupcake cupcakes brownie brownies chocolate candy"
        " pastry pastries donut doughnut pudding muffin muffins tart",
    ),
    "fruit": (
        "fruit fruits",
        "apple apples banana bananas orange oranges strawberry strawberries grape grapes mango"
        " peach pear cherry cherries blueberry blueberries lemon lime watermelon pineapple kiwi"
        " plum raspberry raspberries avocado",
    ),
    "vegetables": (
        "vegetable vegetables veggie veggies",
        "carrot carrots broccoli tomato tomatoes potato potatoes spinach lettuce onion onions"
        " pepper peppers cucumber corn kale zucchini cabbage cauliflower peas beans celery garlic"
        " eggplant pumpkin mushroom mushrooms",
    ),
    "drinks": (
        "drink drinks beverage beverages",
        "coffee tea juice soda smoothie smoothies milk wine beer cocktail lemonade latte espresso",
    ),
    "jobs": (
        "job jobs career careers profession professions occupation occupations",
        "teacher nurse doctor physician engineer lawyer attorney accountant chef programmer"
        " developer designer architect scientist researcher professor counselor therapist"
        " psychologist firefighter policeman pilot dentist pharmacist"
        " veterinarian vet mechanic electrician plumber carpenter journalist writer author editor"
        " photographer musician artist actor actress consultant manager entrepreneur"
        " salesperson cashier barista waiter waitress librarian",
    ),
    "emotions": (
        "emotion emotions feeling feelings mood moods",
        "happy happiness sad sadness angry anger excited excitement nervous anxious anxiety scared"
        " afraid fear proud pride grateful gratitude lonely loneliness stressed stress frustrated"
        " frustration joy joyful worried upset glad thrilled overwhelmed calm relieved hopeful"
        " depressed disappointed jealous ashamed embarrassed",
    ),
    "weather": (
        "weather climate",
        "rain rainy raining snow snowy snowing sunny storm stormy thunderstorm wind windy cloudy"
        " fog foggy hail humid heatwave hurricane tornado drizzle",
    ),
    "seasons": ("season seasons", "spring summer autumn winter"),
    "vehicles": (
        "vehicle vehicles transportation transport",
        "car cars truck bike bicycle motorcycle motorbike bus train van suv boat plane airplane"
        " scooter subway tram taxi jeep",
    ),
    "education": (
        "education school schooling study studies academic academics",
        "college university class classes course courses degree graduate graduation"
        " diploma semester exam exams homework professor student campus lecture lectures"
        " bachelor master phd kindergarten preschool elementary highschool tuition scholarship",
    ),
    "health": (
        "health medical wellbeing wellness",
        "doctor hospital illness sick sickness disease injury surgery therapy medicine medication"
        " diagnosis checkup clinic symptoms diet nutrition sleep",
    ),
    "illness": (
        "illness illnesses sickness disease diseases condition ailment",
        "cold flu fever cancer covid diabetes asthma infection allergy allergies migraine"
        " injury arthritis depression anxiety",
    ),
    "holidays": (
        "holiday holidays",
        "christmas xmas thanksgiving easter halloween hanukkah diwali ramadan eid passover"
        " valentine valentines kwanzaa",
    ),
    "celebrations": (
        "celebration celebrations occasion occasions",
        "birthday anniversary wedding graduation party christmas thanksgiving",
    ),
    "clothing": (
        "clothes clothing outfit outfits apparel garment garments wardrobe",
        "shirt shirts tshirt dress dresses pants trousers jeans jacket coat shoes sneakers hat"
        " skirt sweater hoodie scarf boots socks suit blouse shorts gloves",
    ),
    "books": (
        "book books literature",
        "novel novels fiction nonfiction fantasy mystery romance biography memoir thriller"
        " poetry series author authors",
    ),
    "genres": (
        "genre genres",
        "fantasy mystery romance thriller horror comedy drama scifi fiction documentary"
        " biography memoir adventure",
    ),
    "movies": ("movie movies film films", "cinema documentary documentaries series show shows sequel"),
    "outdoors": (
        "outdoors outdoor nature",
        "park beach mountain mountains lake forest woods river hiking camping trail trails ocean"
        " sea garden meadow waterfall canyon",
    ),
    "events": (
        "event events",
        "concert concerts festival festivals party parties wedding parade conference workshop"
        " fundraiser exhibition competition tournament meetup rally",
    ),
    "games": (
        "game games",
        "chess videogame videogames boardgame cards poker puzzle puzzles minecraft fortnite zelda"
        " monopoly scrabble sudoku",
    ),
    "colors": (
        "color colors colour colours",
        "red blue green yellow purple pink orange black white grey gray brown teal turquoise",
    ),
    "languages": (
        "language languages",
        "english spanish french german italian portuguese chinese mandarin cantonese japanese"
        " korean arabic hindi russian dutch swedish greek hebrew",
    ),
    "religion": (
        "religion religions faith",
        "church mosque temple synagogue christian christianity muslim islam jewish judaism buddhist"
        " buddhism hindu hinduism prayer bible",
    ),
    "cities": (
        "city cities town towns",
        "york nyc angeles francisco chicago boston seattle portland austin dallas houston denver"
        " miami atlanta phoenix philadelphia detroit nashville orlando vegas washington baltimore"
        " pittsburgh cleveland minneapolis sacramento diego honolulu anchorage charlotte"
        " memphis milwaukee toronto vancouver montreal ottawa calgary london paris berlin madrid"
        " barcelona rome milan venice florence naples lisbon amsterdam brussels vienna prague"
        " budapest warsaw krakow copenhagen stockholm oslo helsinki dublin edinburgh glasgow"
        " manchester liverpool zurich geneva munich hamburg frankfurt athens istanbul moscow"
        " kyiv kiev dubai cairo marrakech casablanca nairobi lagos johannesburg capetown tokyo"
        " kyoto osaka seoul beijing shanghai shenzhen hong kong taipei singapore bangkok hanoi"
        " manila jakarta bali delhi mumbai bangalore kolkata karachi sydney melbourne brisbane"
        " perth auckland wellington havana cancun mexico rio paulo aires lima bogota santiago"
        " reykjavik",
    ),
    "countries": (
        "country countries nation nations abroad overseas",
        "usa america canada mexico brazil argentina chile peru colombia venezuela cuba jamaica"
        " england britain uk scotland ireland wales france germany spain portugal italy greece"
        " netherlands holland belgium switzerland austria sweden norway denmark finland iceland"
        " poland russia ukraine hungary czech croatia turkey egypt morocco kenya nigeria ghana"
        " ethiopia africa israel lebanon jordan iran iraq india pakistan bangladesh nepal china"
        " japan korea taiwan vietnam thailand cambodia philippines indonesia malaysia singapore"
        " australia zealand fiji",
    ),
    "continents": (
        "continent continents",
        "africa asia europe america antarctica australia oceania",
    ),
    "places_travel": (
        "trip trips vacation vacations travel traveling travelled destination destinations",
        "beach resort cruise hotel flight roadtrip camping sightseeing tour abroad",
    ),
    "social_media": (
        "media",
        "instagram facebook twitter tiktok youtube snapchat reddit linkedin pinterest",
    ),
    "furniture": ("furniture", "sofa couch chair table desk bed bookshelf dresser"),
    "flowers": (
        "flower flowers plant plants",
        "rose roses tulip tulips sunflower sunflowers daisy daisies lily lilies orchid orchids"
        " lavender succulent succulents cactus fern",
    ),
}


@lru_cache(maxsize=1)
def _tables() -> tuple[dict[str, frozenset[str]], dict[str, frozenset[str]]]:
    """(category token -> member tokens, member token -> category tokens), stemmed like the index."""
    down: dict[str, set[str]] = {}
    up: dict[str, set[str]] = {}
    for names, members in GROUPS.values():
        name_toks = {t for t in tokenize(names) if t not in STOPWORDS}
        member_toks = {t for t in tokenize(members) if t not in STOPWORDS and len(t) > 1} - name_toks
        for n in name_toks:
            down.setdefault(n, set()).update(member_toks)
        for m in member_toks:
            up.setdefault(m, set()).update(name_toks)
    return ({k: frozenset(v) for k, v in down.items()}, {k: frozenset(v) for k, v in up.items()})


def related(tokens: list[str] | set[str], *, down: float = 1.0, up: float = 1.0) -> dict[str, dict[str, float]]:
    """For each of `tokens` (stemmed, as `tokenize` returns them) its related terms -> relative weight.

    A token naming a category brings in its members at `down`; a token that is a member brings in
    the names of its categories at `up`. Terms among `tokens` themselves are never returned; a term
    reached both ways keeps the larger weight. Tokens with nothing related are left out. Grouped
    by token so a ranker can count a category once (a turn listing five pets is not five times
    as relevant to "pets").
    """
    to_members, to_names = _tables()
    given = set(tokens)
    out: dict[str, dict[str, float]] = {}
    for t in given:
        rel: dict[str, float] = {}
        if down > 0:
            for m in to_members.get(t, ()):
                rel[m] = down
        if up > 0:
            for n in to_names.get(t, ()):
                if rel.get(n, 0.0) < up:
                    rel[n] = up
        for g in given & rel.keys():
            del rel[g]
        if rel:
            out[t] = rel
    return out
