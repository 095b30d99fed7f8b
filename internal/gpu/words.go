package gpu

import "strings"

// dummyWords is the vocabulary of the dummy models: common, speakable English words, so that
// anything a dummy model generates can be read aloud by the talker stage. The role names of
// the plain chat template (system, user, assistant) are included so prompts tokenize cleanly.
var dummyWords = strings.Fields(`
the be to of and a in that have i it for not on with he as you do at this but his by from they
we say her she or an will my one all would there their what so up out if about who get which go
me when make can like time no just him know take people into year your good some could them see
other than then now look only come its over think also back after use two how our work first well
way even new want because any these give day most us is are was were been has had did said made
hello yes okay please thank thanks sorry sure right left near far here where why very much many
more less little big small long short high low old young great best better last next same kind
open close start stop wait listen speak talk tell ask answer question voice sound music song word
name place home house room door window table chair book paper letter story news world city town
country street road car bus train plane ship water fire air earth light dark sun moon star sky
rain snow wind tree flower grass garden park river lake sea ocean mountain hill field farm animal
dog cat bird fish horse cow food bread milk coffee tea apple orange lunch dinner breakfast morning
afternoon evening night today tomorrow yesterday week month hour minute second moment early late
soon always never often sometimes again still already together alone friend family mother father
brother sister child children man woman boy girl person team group school class lesson teacher
student doctor nurse music game play run walk jump swim drive ride fly sit stand sleep eat drink
cook read write learn study teach help find keep hold turn move bring carry send show call meet
leave live feel seem become begin end try need mean let put set change follow build grow happy
glad calm quiet loud warm cold hot cool fresh clean clear easy hard simple quick slow ready free
full empty true real nice fine bad sad funny strange red blue green yellow white black brown gray
one two three four five six seven eight nine ten hundred thousand half number color shape size
system user assistant forward meters move ahead robot computer phone message idea plan problem
reason example point part side end line form power money price market job office company today
`)
