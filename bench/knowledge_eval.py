"""The evaluation set of the knowledge base (bench/knowledge.py): a product manual written for it (free to
redistribute: it is this project's), one page per topic, with questions asked in other words than the page's."""

from __future__ import annotations

#: (page text, questions whose answer is on that page); page n of the PDF is MANUAL[n - 1]
MANUAL: list[tuple[str, list[str]]] = [
    ("Welcome. The Aurora H2 is a home hub that controls lights, heating and door locks from one app. This manual "
     "covers model H2 with firmware 4.x.",
     ["Which firmware versions does this guide describe?", "What can the device switch on and off in a house?"]),
    ("In the box. You will find the hub, a 12 V power adapter, a flat Ethernet cable, two wall screws and a "
     "quick-start card.",
     ["What accessories come packed with the product?", "Is a network cable supplied?"]),
    ("Placement. Put the hub in a central spot, at least one metre above the floor and away from microwave ovens, "
     "which disturb its radio.",
     ["Where should I mount the unit for the best signal?", "Can a kitchen appliance interfere with it?"]),
    ("Power. Connect the adapter; the ring light turns amber while starting and green when ready, after about "
     "forty seconds.",
     ["What colour means it has finished booting?", "How long does start-up take?"]),
    ("Wi-Fi setup. Open the Aurora app, tap Add device, scan the QR code under the hub and choose a 2.4 GHz "
     "network; 5 GHz networks are not supported.",
     ["Can I join it to a 5 GHz wireless network?", "How do I pair the hub with my phone?"]),
    ("Ethernet. A wired connection is more reliable: plug the cable into the LAN port and the hub switches from "
     "wireless automatically.",
     ["Does it work with a cable instead of wireless?", "Which port does the wired connection use?"]),
    ("Accounts. Each home has one owner account; the owner can invite up to eight members, who can control devices "
     "but cannot delete them.",
     ["How many family members can share control?", "Who is allowed to remove devices?"]),
    ("Adding lights. Hold a bulb's switch off and on three times; it blinks twice when the hub has found it. Zigbee "
     "and Matter bulbs work.",
     ["How do I make a new lamp discoverable?", "Which smart bulb standards are compatible?"]),
    ("Scenes. A scene stores the state of several devices; tap a scene to restore it. Up to 64 scenes per home.",
     ["What is the maximum number of presets a household can save?", "How do I recall a saved lighting mood?"]),
    ("Schedules. Schedules run a scene at a time of day or at sunrise and sunset, computed from the home's "
     "address.",
     ["Can automations follow when it gets dark outside?", "How does it know local dawn times?"]),
    ("Heating. The hub talks to thermostatic radiator valves; set a target temperature per room between 5 and 30 "
     "degrees Celsius.",
     ["What is the lowest temperature I can choose for a room?", "Does it work with radiator valves?"]),
    ("Eco mode. When everyone leaves home, eco mode lowers heating to 17 degrees and turns off lights after ten "
     "minutes.",
     ["What happens to the radiators when the house is empty?", "How soon do lamps switch off when we go out?"]),
    ("Door locks. Supported locks can be opened from the app; every opening is recorded with who opened it and when, "
     "kept for 90 days.",
     ["How long is the entry log retained?", "Can I see which person unlocked the front door?"]),
    ("Guest codes. Create a temporary PIN for a visitor; it works only within the hours you choose and expires "
     "automatically.",
     ["How can a babysitter get in without a key?", "Do visitor passcodes stop working by themselves?"]),
    ("Voice assistants. Link the hub to Alexa or Google Assistant in the app's Integrations tab; Siri works "
     "through Matter.",
     ["Is Apple's assistant supported?", "Where do I connect a smart speaker?"]),
    ("Battery backup. If the mains fails, the built-in battery keeps the hub and door locks working for up to six "
     "hours.",
     ["What happens during a power cut?", "How many hours does the reserve cell last?"]),
    ("Updates. Firmware updates install automatically at 3 a.m. local time; you can postpone one for up to seven "
     "days.",
     ["When does new software get installed?", "Can I delay an upgrade by a week?"]),
    ("Privacy. Video is not recorded; device events are stored in the EU region and deleted after 12 months unless "
     "you export them.",
     ["Where is my data kept?", "How long until activity history is erased?"]),
    ("Resetting. Press the pinhole button for ten seconds until the ring flashes red; this erases all devices and "
     "settings.",
     ["How do I restore factory defaults?", "What does a red flashing ring mean?"]),
    ("Troubleshooting: offline. If the app shows the hub offline, check the router, then restart the hub by "
     "unplugging it for ten seconds.",
     ["The app says it is not connected; what should I try?", "How do I reboot the device?"]),
    ("Troubleshooting: lights. A bulb that stops responding is usually too far away; add a mains-powered plug "
     "between them as a repeater.",
     ["A lamp in the garden no longer reacts; how can I fix it?", "How do I extend the radio range?"]),
    ("Cleaning. Wipe the hub with a dry cloth. Do not use sprays or solvents, and keep it away from water.",
     ["Can I use a liquid cleaner on the case?", "How should I dust the unit?"]),
    ("Specifications. Size 110 x 110 x 32 mm, weight 240 g, power 12 V 1 A, radios Zigbee 3.0, Thread and Bluetooth "
     "5.2.",
     ["How heavy is it?", "What are the dimensions of the box?"]),
    ("Warranty. The hub is covered for two years from purchase against manufacturing defects; keep the receipt and "
     "contact support@aurora.example.",
     ["How long is the guarantee?", "What proof do I need for a repair claim?"]),
]
