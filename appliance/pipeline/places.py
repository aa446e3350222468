"""Names of countries, what their people are called, and which countries a text names.

A closed list: the sovereign states of today under their common names and usual short forms,
the constituent countries of the United Kingdom, and the former states that biographies and
histories name as a person's or a place's country. What a text names is found by whole-word
matches, the longest first, so that a name inside a longer one ("New Mexico", "Papua New
Guinea") is not counted as well.
"""

from __future__ import annotations

import re
from functools import lru_cache

COUNTRIES = frozenset("""
Afghanistan|Albania|Algeria|Andorra|Angola|Antigua and Barbuda|Argentina|Armenia|Australia|
Austria|Azerbaijan|Bahamas|The Bahamas|Bahrain|Bangladesh|Barbados|Belarus|Belgium|Belize|Benin|
Bhutan|Bolivia|Bosnia and Herzegovina|Botswana|Brazil|Brunei|Bulgaria|Burkina Faso|Burundi|
Cabo Verde|Cape Verde|Cambodia|Cameroon|Canada|Central African Republic|Chad|Chile|China|
People's Republic of China|Colombia|Comoros|Republic of the Congo|Democratic Republic of the Congo|
Congo|Costa Rica|Côte d'Ivoire|Ivory Coast|Croatia|Cuba|Cyprus|Czech Republic|Czechia|Denmark|
Djibouti|Dominica|Dominican Republic|Ecuador|Egypt|El Salvador|Equatorial Guinea|Eritrea|Estonia|
Eswatini|Swaziland|Ethiopia|Fiji|Finland|France|Gabon|Gambia|The Gambia|Georgia|Germany|Ghana|
Greece|Grenada|Guatemala|Guinea|Guinea-Bissau|Guyana|Haiti|Honduras|Hungary|Iceland|India|
Indonesia|Iran|Iraq|Ireland|Republic of Ireland|Israel|Italy|Jamaica|Japan|Jordan|Kazakhstan|
Kenya|Kiribati|Kuwait|Kyrgyzstan|Laos|Latvia|Lebanon|Lesotho|Liberia|Libya|Liechtenstein|
Lithuania|Luxembourg|Madagascar|Malawi|Malaysia|Maldives|Mali|Malta|Marshall Islands|Mauritania|
Mauritius|Mexico|Micronesia|Moldova|Monaco|Mongolia|Montenegro|Morocco|Mozambique|Myanmar|Burma|
Namibia|Nauru|Nepal|Netherlands|The Netherlands|Holland|New Zealand|Nicaragua|Niger|Nigeria|
North Korea|South Korea|Korea|North Macedonia|Macedonia|Norway|Oman|Pakistan|Palau|Palestine|
Panama|Papua New Guinea|Paraguay|Peru|Philippines|The Philippines|Poland|Portugal|Qatar|Romania|
Russia|Russian Federation|Rwanda|Saint Kitts and Nevis|Saint Lucia|Saint Vincent and the Grenadines|
Samoa|San Marino|São Tomé and Príncipe|Saudi Arabia|Senegal|Serbia|Seychelles|Sierra Leone|
Singapore|Slovakia|Slovenia|Solomon Islands|Somalia|South Africa|South Sudan|Spain|Sri Lanka|
Sudan|Suriname|Sweden|Switzerland|Syria|Taiwan|Tajikistan|Tanzania|Thailand|Timor-Leste|
East Timor|Togo|Tonga|Trinidad and Tobago|Tunisia|Turkey|Türkiye|Turkmenistan|Tuvalu|Uganda|
Ukraine|United Arab Emirates|United Kingdom|UK|U.K.|Great Britain|Britain|England|Scotland|Wales|
Northern Ireland|United States|United States of America|U.S.|U.S.A.|USA|US|Uruguay|Uzbekistan|
Vanuatu|Vatican City|Holy See|Venezuela|Vietnam|Viet Nam|Yemen|Zambia|Zimbabwe|Kosovo|
Soviet Union|USSR|Yugoslavia|Czechoslovakia|East Germany|West Germany|Austria-Hungary|
Ottoman Empire|Russian Empire|Prussia|Persia|Siam|Ceylon|Zaire|Rhodesia
""".replace("\n", "").split("|")) - {""}

# What a text calls a country's people and things ("a Danish shipowner"), for the country:
# a text often says where someone is from only this way.
DEMONYMS = {k: v for part in """
American:United States|British:United Kingdom|English:England|Scottish:Scotland|Welsh:Wales|
Irish:Ireland|Northern Irish:Northern Ireland|Canadian:Canada|Australian:Australia|
New Zealander:New Zealand|Mexican:Mexico|Brazilian:Brazil|Argentine:Argentina|Argentinian:Argentina|
Chilean:Chile|Peruvian:Peru|Colombian:Colombia|Venezuelan:Venezuela|Cuban:Cuba|Jamaican:Jamaica|
Haitian:Haiti|Ecuadorian:Ecuador|Bolivian:Bolivia|Paraguayan:Paraguay|Uruguayan:Uruguay|
Costa Rican:Costa Rica|Panamanian:Panama|Guatemalan:Guatemala|Honduran:Honduras|
Salvadoran:El Salvador|Nicaraguan:Nicaragua|French:France|German:Germany|Italian:Italy|
Spanish:Spain|Portuguese:Portugal|Dutch:Netherlands|Belgian:Belgium|Swiss:Switzerland|
Austrian:Austria|Swedish:Sweden|Norwegian:Norway|Danish:Denmark|Finnish:Finland|
Icelandic:Iceland|Polish:Poland|Czech:Czech Republic|Slovak:Slovakia|Hungarian:Hungary|
Romanian:Romania|Bulgarian:Bulgaria|Greek:Greece|Turkish:Turkey|Russian:Russia|
Ukrainian:Ukraine|Belarusian:Belarus|Serbian:Serbia|Croatian:Croatia|Bosnian:Bosnia and Herzegovina|
Slovenian:Slovenia|Slovene:Slovenia|Albanian:Albania|Macedonian:North Macedonia|
Montenegrin:Montenegro|Estonian:Estonia|Latvian:Latvia|Lithuanian:Lithuania|Georgian:Georgia|
Armenian:Armenia|Azerbaijani:Azerbaijan|Kazakh:Kazakhstan|Uzbek:Uzbekistan|Maltese:Malta|
Cypriot:Cyprus|Israeli:Israel|Palestinian:Palestine|Lebanese:Lebanon|Syrian:Syria|
Jordanian:Jordan|Iraqi:Iraq|Iranian:Iran|Persian:Persia|Saudi:Saudi Arabia|Qatari:Qatar|
Emirati:United Arab Emirates|Kuwaiti:Kuwait|Omani:Oman|Yemeni:Yemen|Bahraini:Bahrain|
Egyptian:Egypt|Moroccan:Morocco|Algerian:Algeria|Tunisian:Tunisia|Libyan:Libya|Sudanese:Sudan|
Ethiopian:Ethiopia|Somali:Somalia|Kenyan:Kenya|Ugandan:Uganda|Tanzanian:Tanzania|Rwandan:Rwanda|
Congolese:Congo|Cameroonian:Cameroon|Nigerian:Nigeria|Ghanaian:Ghana|Senegalese:Senegal|
South African:South Africa|Zimbabwean:Zimbabwe|Indian:India|Pakistani:Pakistan|
Bangladeshi:Bangladesh|Sri Lankan:Sri Lanka|Nepalese:Nepal|Nepali:Nepal|Afghan:Afghanistan|
Chinese:China|Japanese:Japan|Korean:Korea|South Korean:South Korea|North Korean:North Korea|
Taiwanese:Taiwan|Vietnamese:Vietnam|Thai:Thailand|Filipino:Philippines|Philippine:Philippines|
Indonesian:Indonesia|Malaysian:Malaysia|Singaporean:Singapore|Burmese:Myanmar|
Cambodian:Cambodia|Mongolian:Mongolia|Fijian:Fiji|Samoan:Samoa|Soviet:Soviet Union|
Yugoslav:Yugoslavia|Czechoslovak:Czechoslovakia|Ottoman:Ottoman Empire|Prussian:Prussia
""".replace("\n", "").split("|") if part for k, v in [part.split(":")]}

# Longer names that hold a country's name but name something else (a state, a region).
NOT_COUNTRIES = frozenset({"New Mexico", "New South Wales", "New England", "Panama City", "Jordan River",
                           "Georgia Tech", "Chad Valley"})


@lru_cache(maxsize=1)
def _pattern() -> re.Pattern:
    names = sorted(COUNTRIES | NOT_COUNTRIES | set(DEMONYMS), key=len, reverse=True)
    return re.compile(r"(?<![\w.])(" + "|".join(re.escape(n) for n in names) + r")(?![\w])")


def countries_named(text: str) -> list[str]:
    """The countries ``text`` names, each once, in the order of their first mention: under the
    name the text gives them ("the U.S. Army and the United States Navy" -> ["U.S.", "United
    States"]), or under the list's name where the text says only what its people or things are
    called ("a Danish shipowner" -> ["Denmark"]). Names of the lists above, matched whole and
    longest first."""
    found: list[str] = []
    for match in _pattern().finditer(text or ""):
        name = DEMONYMS.get(match.group(1), match.group(1))
        if name in COUNTRIES and name not in found:
            found.append(name)
    return found


def named_by_demonym(country: str, text: str) -> bool:
    """Whether ``text`` calls ``country``'s people or things by their name ("Dutch" for the
    Netherlands): a country's name rests on such a text as on one that writes the name."""
    forms = [d for d, c in DEMONYMS.items() if c == country]
    return any(re.search(r"(?<![\w.])" + re.escape(form) + r"(?![\w])", text) for form in forms)
